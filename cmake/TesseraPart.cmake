# tessera_part(<name> [PUBLIC deps...] [PRIVATE deps...] [TEST_DEPS deps...]
#              [TEST_PROPERTIES props...])
#
# The shape every part under src/ shares: the library tessera_<name> from the
# folder's *.cc (not *_test.cc, not main.cc), headers included as "<part>/x.h"
# from src/, the project's warnings; and, when the folder has *_test.cc, the
# unit-test executable <name>_test beside it, discovered by ctest (leveldb's
# habit: x.cc and x_test.cc side by side).
function(tessera_part name)
  cmake_parse_arguments(PART "" "" "PUBLIC;PRIVATE;TEST_DEPS;TEST_PROPERTIES" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.cc)
  list(FILTER sources EXCLUDE REGEX "(_test|/main)\\.cc$")
  add_library(tessera_${name} STATIC ${sources})
  target_include_directories(tessera_${name} PUBLIC ${CMAKE_SOURCE_DIR}/src)
  target_link_libraries(tessera_${name} PUBLIC ${PART_PUBLIC} PRIVATE ${PART_PRIVATE})
  tessera_warnings(tessera_${name})

  file(GLOB tests CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*_test.cc)
  if(tests)
    add_executable(${name}_test ${tests})
    target_link_libraries(${name}_test PRIVATE tessera_${name} ${PART_TEST_DEPS} GTest::gtest_main GTest::gmock)
    tessera_warnings(${name}_test)
    if(PART_TEST_PROPERTIES)
      gtest_discover_tests(${name}_test DISCOVERY_TIMEOUT 60 PROPERTIES ${PART_TEST_PROPERTIES})
    else()
      gtest_discover_tests(${name}_test DISCOVERY_TIMEOUT 60)
    endif()
  endif()
endfunction()
