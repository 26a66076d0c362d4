# kvserve_module(NAME SOURCES... LINKS...) makes library kvserve_NAME whose headers are included
# as "NAME/header.h" (the src/ folder is the include root) plus the public include/ folder.
function(kvserve_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LINKS" ${ARGN})
  add_library(kvserve_${name} STATIC ${ARG_SOURCES})
  target_include_directories(kvserve_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(kvserve_${name} PUBLIC ${ARG_LINKS})
  kvserve_warnings(kvserve_${name})
endfunction()

function(kvserve_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic
    -Wno-missing-field-initializers)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wshadow=local)
  else()
    target_compile_options(${target} PRIVATE -Wshadow-uncaptured-local)
  endif()
endfunction()
