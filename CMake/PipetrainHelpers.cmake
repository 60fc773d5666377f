# Helpers shared by every target: warnings, sanitizers, one library per source folder.

function(pipetrain_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wnon-virtual-dtor
      -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough>)
  if(PIPETRAIN_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

if(PIPETRAIN_SANITIZE)
  add_compile_options(-fsanitize=${PIPETRAIN_SANITIZE} -fno-omit-frame-pointer -fno-sanitize-recover=all)
  add_link_options(-fsanitize=${PIPETRAIN_SANITIZE})
endif()

# pipetrain_library(name folder [PUBLIC deps...] [PRIVATE deps...])
# Compiles every .cpp directly inside `folder` (not its sub-folders, which are their own
# libraries or plugins) into one library. Sub-folders listed in the folder's own
# `sources.cmake`, if present, are added too.
function(pipetrain_library name folder)
  cmake_parse_arguments(ARG "" "" "PUBLIC;PRIVATE" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/${folder}/*.cpp")
  if(EXISTS "${CMAKE_CURRENT_SOURCE_DIR}/${folder}/sources.cmake")
    include("${CMAKE_CURRENT_SOURCE_DIR}/${folder}/sources.cmake")  # may append to `sources`
  endif()
  if(sources)
    add_library(${name} ${sources})
    target_include_directories(${name} PUBLIC
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/pipetrain>)
    target_link_libraries(${name} PUBLIC ${ARG_PUBLIC} PRIVATE ${ARG_PRIVATE})
    pipetrain_warnings(${name})
  else()
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE
      $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
      $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/pipetrain>)
    target_link_libraries(${name} INTERFACE ${ARG_PUBLIC})
  endif()
  set_property(GLOBAL APPEND PROPERTY PIPETRAIN_LIBRARIES ${name})
endfunction()

# pipetrain_test(name folder [LABELS ...]): one doctest binary from every *_test.cpp in folder.
function(pipetrain_test name folder)
  cmake_parse_arguments(ARG "" "" "LABELS;LIBS" ${ARGN})
  file(GLOB sources CONFIGURE_DEPENDS "${PROJECT_SOURCE_DIR}/${folder}/*.cpp")
  add_executable(${name} ${PROJECT_SOURCE_DIR}/tests/doctest_main.cpp ${sources})
  target_link_libraries(${name} PRIVATE pipetrain doctest::doctest ${ARG_LIBS})
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR})
  pipetrain_warnings(${name})
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}" SKIP_RETURN_CODE 77
    ENVIRONMENT "PIPETRAIN_TEST_DATA=${PROJECT_SOURCE_DIR}/tests/data;OMP_NUM_THREADS=1")
endfunction()
