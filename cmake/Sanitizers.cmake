# ASan + UBSan build (CI runs the whole test suite once under it).
if(CRYSTAL_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# Threads: the plugin's pacing, recorder and host threads run beside NCCL's.
if(CRYSTAL_TSAN)
  if(CRYSTAL_SANITIZE)
    message(FATAL_ERROR "CRYSTAL_TSAN and CRYSTAL_SANITIZE cannot be combined")
  endif()
  add_compile_options(-fsanitize=thread -fno-omit-frame-pointer)
  # The GPU-shared rings order their stores with fences, which TSan does not model (GCC
  # warns for each); their races with the GPU are not TSan's to see anyway.
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    add_compile_options(-Wno-tsan)
  endif()
  add_link_options(-fsanitize=thread)
endif()

# Fuzz build: instrument everything for coverage; each fuzzer links libFuzzer's main.
if(CRYSTAL_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "CRYSTAL_FUZZ needs clang (scripts/build fuzz sets it)")
  endif()
  add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
  add_custom_target(crystal_fuzzers)
endif()

# crystal_add_fuzzer(name source... LIBS lib...) builds build*/fuzz/<name> when CRYSTAL_FUZZ
# is on; `scripts/fuzz` runs every one of them on tests/fuzz/corpus/<name without _fuzz>.
function(crystal_add_fuzzer name)
  cmake_parse_arguments(F "" "" "LIBS" ${ARGN})
  if(NOT CRYSTAL_FUZZ)
    return()
  endif()
  add_executable(${name} ${F_UNPARSED_ARGUMENTS})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${name} PRIVATE ${F_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  add_dependencies(crystal_fuzzers ${name})
endfunction()
