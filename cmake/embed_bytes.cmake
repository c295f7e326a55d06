# cmake -DIN=file -DOUT=file.cc -DNAME=symbol -DNAMESPACE=ns -P embed_bytes.cmake
# Writes a C++ source defining `const unsigned char NAME[]` with the bytes of IN (the
# kernels' fatbins, plugin/CMakeLists.txt).
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "// Generated from ${IN} by cmake/embed_bytes.cmake; do not edit.\n"
  "namespace ${NAMESPACE} {\n"
  "extern const unsigned char ${NAME}[];\n"
  "alignas(16) const unsigned char ${NAME}[] = {\n${bytes}\n};\n"
  "}  // namespace ${NAMESPACE}\n")
