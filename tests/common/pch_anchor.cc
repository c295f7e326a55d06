// The executable that builds the tests' precompiled header (tests/CMakeLists.txt): compiled
// with the test binaries' flags, so they can use it. Never run.
int main() { return 0; }
