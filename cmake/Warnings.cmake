# kvserve_module(NAME SOURCES... [SERVING_SOURCES...] LINKS...) makes library kvserve_NAME whose
# headers are included as "NAME/header.h" (the src/ folder is the include root) plus the public
# include/ folder. SERVING_SOURCES are sources of a numeric module that run once per request or
# per file, not per token: they compile like the serving modules (KVSERVE_SERVING_OPT), as the
# object library kvserve_NAME_serving whose objects go into kvserve_NAME.
function(kvserve_module name)
  cmake_parse_arguments(ARG "" "" "SOURCES;SERVING_SOURCES;LINKS" ${ARGN})
  add_library(kvserve_${name} STATIC ${ARG_SOURCES})
  kvserve_module_flags(kvserve_${name} PUBLIC "${ARG_LINKS}")
  if(name IN_LIST KVSERVE_SERVING_MODULES)
    kvserve_serving_opt(kvserve_${name})
  endif()
  if(ARG_SERVING_SOURCES)
    add_library(kvserve_${name}_serving OBJECT ${ARG_SERVING_SOURCES})
    kvserve_module_flags(kvserve_${name}_serving PRIVATE "${ARG_LINKS}")
    kvserve_serving_opt(kvserve_${name}_serving)
    target_sources(kvserve_${name} PRIVATE $<TARGET_OBJECTS:kvserve_${name}_serving>)
  endif()
endfunction()

# kvserve_module_flags(TARGET PUBLIC|PRIVATE LINKS): a module library's include root, links,
# warnings and unity grouping.
function(kvserve_module_flags target scope links)
  target_include_directories(${target} ${scope} ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(${target} ${scope} ${links})
  kvserve_warnings(${target})
  # KVSERVE_UNITY (every build of the test suite): a module's sources compile in groups,
  # so each group parses the headers it shares once. A source with flags of its own (an ISA
  # kernel, -ffp-contract=off) sets SKIP_UNITY_BUILD_INCLUSION and compiles alone.
  if(KVSERVE_UNITY)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
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
