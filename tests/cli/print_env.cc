// Test child for `crystal emulate`: prints NAME=VALUE (or NAME unset) for each argument,
// then exits with the status given by env PRINT_ENV_EXIT (default 0).
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const char* v = std::getenv(argv[i]);
    if (v != nullptr)
      std::printf("%s=%s\n", argv[i], v);
    else
      std::printf("%s unset\n", argv[i]);
  }
  const char* code = std::getenv("PRINT_ENV_EXIT");
  return code != nullptr ? std::atoi(code) : 0;
}
