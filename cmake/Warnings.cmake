# Project-wide warning set; CI turns on -Werror through CRYSTAL_WERROR.
add_compile_options(-Wall -Wextra -Wpedantic -Wnon-virtual-dtor -Wimplicit-fallthrough)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wshadow=local)  # clang has no =local form
endif()
if(CRYSTAL_WERROR)
  add_compile_options(-Werror)
endif()
