# tessera_gtest: a googletest program of tests/, registered with ctest, and the
# built binaries it runs (the simulated GPU's libraries, tessera-node, libvgpu,
# a probe, the CLI, ...) compiled in by path and built before it.
#
#   tessera_gtest(<name> SOURCES <file>...
#     [LINK <library>...]              linked PRIVATE, with GTest::gtest_main
#     [FILES <MACRO>=<target>...]      MACRO="$<TARGET_FILE:target>", built first
#     [DIRS <MACRO>=<target>...]       MACRO="$<TARGET_FILE_DIR:target>", built first
#     [DEPENDS <target>...]            built first, named by no macro
#     [DEFINES <MACRO>=<value>...]     other compile definitions
#     [TIMEOUT <seconds>]              each test's (default 120)
#     [LABEL <label>]                  the ctest label (default: integration); one:
#                                      gtest_discover_tests flattens a list into
#                                      the properties (a second label would
#                                      become a property name)
#     [PRELOADS_LIBVGPU])              not registered under sanitizers (below)
#
# Targets defined after the calling folder (the `tessera` CLI, src/cli, comes
# last) may be named: generator expressions and add_dependencies resolve at
# generate time.
include_guard(GLOBAL)

function(tessera_gtest name)
  cmake_parse_arguments(T "PRELOADS_LIBVGPU" "TIMEOUT;LABEL" "SOURCES;LINK;FILES;DIRS;DEPENDS;DEFINES" ${ARGN})
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 120)
  endif()
  if(NOT T_LABEL)
    set(T_LABEL integration)
  endif()
  add_executable(${name} ${T_SOURCES})
  target_link_libraries(${name} PRIVATE ${T_LINK} GTest::gtest_main)
  set(definitions ${T_DEFINES})
  set(dependencies ${T_DEPENDS})
  foreach(kind FILES DIRS)
    foreach(pair ${T_${kind}})
      string(REPLACE "=" ";" parts "${pair}")
      list(GET parts 0 macro)
      list(GET parts 1 target)
      if(kind STREQUAL "FILES")
        list(APPEND definitions "${macro}=\"$<TARGET_FILE:${target}>\"")
      else()
        list(APPEND definitions "${macro}=\"$<TARGET_FILE_DIR:${target}>\"")
      endif()
      list(APPEND dependencies ${target})
    endforeach()
  endforeach()
  if(definitions)
    target_compile_definitions(${name} PRIVATE ${definitions})
  endif()
  if(dependencies)
    list(REMOVE_DUPLICATES dependencies)
    add_dependencies(${name} ${dependencies})
  endif()
  tessera_warnings(${name})
  # Preloading an instrumented libvgpu into an uninstrumented probe cannot work.
  if(T_PRELOADS_LIBVGPU AND NOT TESSERA_SANITIZE STREQUAL "")
    return()
  endif()
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT ${T_TIMEOUT} LABELS ${T_LABEL})
endfunction()
