# Helpers shared by every target: warnings, sanitizers, one library per source folder.

function(pipetrain_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wnon-virtual-dtor
      -Wold-style-cast -Wcast-align -Woverloaded-virtual -Wimplicit-fallthrough>)
  if(PIPETRAIN_WERROR)
    target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
  endif()
endfunction()

# Fuzzing (tests/fuzz) needs libFuzzer, which only clang has, and the sanitizers that turn a bad
# read into a finding. Only the fuzz programs and their own copies of the parsers get the fuzzer's
# coverage instrumentation (tests/fuzz/CMakeLists.txt), so the fuzz targets can be part of a
# build that also runs the tests under ASan + UBSan: CI builds them with those tests, once
# (scripts/test-all.sh).
if(PIPETRAIN_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "PIPETRAIN_FUZZ=ON needs clang (libFuzzer), but the C++ compiler is "
      "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER}: configure a fresh build folder with "
      "-DCMAKE_CXX_COMPILER=clang++-14 (Debian package clang-14), as scripts/fuzz-short.sh does")
  endif()
  if(NOT PIPETRAIN_SANITIZE)
    set(PIPETRAIN_SANITIZE "address,undefined")
  elseif(NOT PIPETRAIN_SANITIZE MATCHES "address")
    message(FATAL_ERROR "PIPETRAIN_FUZZ=ON needs AddressSanitizer (a bad read must be a finding), "
      "but PIPETRAIN_SANITIZE is '${PIPETRAIN_SANITIZE}': use -DPIPETRAIN_SANITIZE=address,undefined")
  endif()
endif()

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

# Environment for every test that runs mpirun (Open MPI 4.1). It refuses to run as root
# (containers, CI) without the first two; the others make it reliable on one machine:
#   btl_vader_single_copy_mechanism=none  vader's default (CMA) needs ptrace permission, which
#                                         many containers deny ("vader single copy" errors); where
#                                         it works (our CI container) it was measured slower than
#                                         none at every size from 4 KiB to 64 MiB (2 ranks)
#   btl=self,vader                        shared memory only: no probing of network interfaces
#   rmaps_base_oversubscribe=1            more ranks than cores, for tests that call mpiexec
#                                         themselves (pipetrain_mpi_test also passes --oversubscribe)
set(PIPETRAIN_MPI_TEST_ENVIRONMENT
  "OMPI_ALLOW_RUN_AS_ROOT=1;OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
  "OMPI_MCA_btl_vader_single_copy_mechanism=none;OMPI_MCA_btl=self,vader"
  "OMPI_MCA_rmaps_base_oversubscribe=1;OMP_NUM_THREADS=1")
if(PIPETRAIN_SANITIZE MATCHES "address")
  # Open MPI keeps what MPI_Init allocated until exit: suppress leaks inside MPI's libraries only.
  # Its plugins must stay loaded (no dlclose) and the unwinder must not rely on frame pointers,
  # or those leaks show as <unknown module> and no suppression can match them.
  list(APPEND PIPETRAIN_MPI_TEST_ENVIRONMENT "OMPI_MCA_mca_base_component_disable_dlclose=1"
    "LSAN_OPTIONS=suppressions=${PROJECT_SOURCE_DIR}/tests/comm_mpi/lsan.supp:fast_unwind_on_malloc=0")
endif()

# pipetrain_mpi_test(NAME name NP n COMMAND exe [args...] [LABELS ...] [TIMEOUT s])
# A ctest that runs `mpiexec -np n --oversubscribe exe args...` (Open MPI's flags), labelled "mpi"
# plus LABELS. `exe` may be a target name. Nothing without MPI (-DPIPETRAIN_MPI=OFF).
function(pipetrain_mpi_test)
  if(NOT PIPETRAIN_MPI)
    return()
  endif()
  cmake_parse_arguments(ARG "" "NAME;NP;TIMEOUT" "COMMAND;LABELS" ${ARGN})
  if(NOT ARG_NAME OR NOT ARG_NP OR NOT ARG_COMMAND)
    message(FATAL_ERROR "pipetrain_mpi_test: NAME, NP and COMMAND are required")
  endif()
  list(POP_FRONT ARG_COMMAND exe)
  if(TARGET ${exe})
    set(exe $<TARGET_FILE:${exe}>)
  endif()
  add_test(NAME ${ARG_NAME}
    COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} ${ARG_NP} --oversubscribe
      ${MPIEXEC_PREFLAGS} ${exe} ${MPIEXEC_POSTFLAGS} ${ARG_COMMAND})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 300)
  endif()
  set_tests_properties(${ARG_NAME} PROPERTIES LABELS "mpi;${ARG_LABELS}" TIMEOUT ${ARG_TIMEOUT}
    ENVIRONMENT "${PIPETRAIN_MPI_TEST_ENVIRONMENT}")
endfunction()
