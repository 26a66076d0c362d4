# kvserve_module(NAME SOURCES... LINKS...) makes library kvserve_NAME whose headers are included
# as "NAME/header.h" (the src/ folder is the include root) plus the public include/ folder.
function(kvserve_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;LINKS" ${ARGN})
  add_library(kvserve_${name} STATIC ${ARG_SOURCES})
  target_include_directories(kvserve_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(kvserve_${name} PUBLIC ${ARG_LINKS})
  kvserve_warnings(kvserve_${name})
  # KVSERVE_UNITY (every build of the test suite): a module's sources compile in groups,
  # so each group parses the headers it shares once. A source with flags of its own (an ISA
  # kernel, -ffp-contract=off) sets SKIP_UNITY_BUILD_INCLUSION and compiles alone.
  if(KVSERVE_UNITY)
    set_target_properties(kvserve_${name} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  endif()
  if(name IN_LIST KVSERVE_SERVING_MODULES)
    kvserve_serving_opt(kvserve_${name})
  endif()
endfunction()

# kvserve_serving_opt(TARGET): KVSERVE_SERVING_OPT (CMakeLists.txt), where it is set, replaces
# the build type's optimization level for TARGET's own sources.
function(kvserve_serving_opt target)
  if(KVSERVE_SERVING_OPT)
    target_compile_options(${target} PRIVATE ${KVSERVE_SERVING_OPT})
  endif()
endfunction()

function(kvserve_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic
    -Wno-missing-field-initializers)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
    target_compile_options(${target} PRIVATE -Wshadow=local)
    # A grouped source is an included file to GCC, which then warns about every class of its
    # own that holds a type from its anonymous namespace (correct code either way).
    if(KVSERVE_UNITY)
      target_compile_options(${target} PRIVATE -Wno-subobject-linkage)
    endif()
  else()
    target_compile_options(${target} PRIVATE -Wshadow-uncaptured-local)
  endif()
endfunction()
