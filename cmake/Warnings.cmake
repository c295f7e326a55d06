# Project-wide warning set; CI turns on -Werror through CRYSTAL_WERROR.
add_compile_options(-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor
                    -Wimplicit-fallthrough)
if(CRYSTAL_WERROR)
  add_compile_options(-Werror)
endif()
