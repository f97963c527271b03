# Helpers that give every cordon target the same flags, so that a folder's CMakeLists.txt
# only says what it builds and what it depends on.

set(CORDON_WARNINGS -Wall -Wextra -Werror -Wno-missing-field-initializers)

if(CORDON_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()

# cordon_library(name SOURCES ... DEPS ...): a static library named cordon_<name>.
function(cordon_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(cordon_${name} STATIC ${ARG_SOURCES})
  target_include_directories(cordon_${name} PUBLIC ${CMAKE_SOURCE_DIR})
  target_compile_options(cordon_${name} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${CORDON_WARNINGS}>)
  target_link_libraries(cordon_${name} PUBLIC ${ARG_DEPS})
endfunction()

# cordon_test(name SOURCES ... DEPS ... [LABELS ...]): a GoogleTest binary registered with ctest.
# Every test carries the label "unit" unless LABELS says otherwise.
function(cordon_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS;FIXTURES" ${ARGN})
  if(NOT ARG_LABELS)
    set(ARG_LABELS unit)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${CORDON_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60)
  # Labels are set by a script of our own that ctest runs after the discovered list: passed
  # through gtest_discover_tests' PROPERTIES, a list such as "unit;vmm" would be split apart.
  set(labels_script "${CMAKE_CURRENT_BINARY_DIR}/${name}_labels.cmake")
  # FIXTURES: ctest fixtures (set up once, e.g. a cached template) that every case needs.
  set(fixture_props "")
  if(ARG_FIXTURES)
    set(fixture_props " FIXTURES_REQUIRED \"${ARG_FIXTURES}\"")
  endif()
  file(WRITE "${labels_script}"
    "if(${name}_TESTS)\n  set_tests_properties(\${${name}_TESTS} PROPERTIES LABELS \"${ARG_LABELS}\"${fixture_props})\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${labels_script}")
endfunction()

# cordon_benchmark(name SOURCES ... DEPS ...): a Google Benchmark binary in bench/.
function(cordon_benchmark name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT CORDON_BENCH)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE ${CORDON_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} benchmark::benchmark)
endfunction()

# cordon_fuzzer(name SOURCES ... DEPS ...): a libFuzzer target, built only with CORDON_FUZZ
# (clang). The test command runs each one briefly over its seed corpus.
function(cordon_fuzzer name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  if(NOT CORDON_FUZZ)
    return()
  endif()
  add_executable(${name} ${ARG_SOURCES})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined -g)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer,address,undefined)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS})
endfunction()
