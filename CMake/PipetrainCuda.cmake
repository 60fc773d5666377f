# The CUDA plugin libpipetrain_cuda.so: built wherever nvcc is found, loaded at run time by
# engine/devices/cuda_plugin.cpp (dlopen) only when CUDA is asked for. Nothing else links CUDA, so a
# CPU-only run never pays for cuBLAS/cuDNN/NCCL (~220 MB RSS, 0.35 s at start).
#
# Sets, for the rest of the build:
#   PIPETRAIN_HAVE_CUDA_PLUGIN  ON when the plugin target pipetrain_cuda exists
#   PIPETRAIN_CUDA_PLUGIN_DIR   where the plugin lands in the build tree (lib/pipetrain)

include(CheckLanguage)

# nvcc is often not on PATH: offer the default toolkit location to check_language's test.
if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
   AND EXISTS /usr/local/cuda/bin/nvcc)
  set(ENV{CUDACXX} /usr/local/cuda/bin/nvcc)
endif()
# nvcc compiles host code with the same compiler as the rest of the project.
if(NOT DEFINED CMAKE_CUDA_HOST_COMPILER AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  set(CMAKE_CUDA_HOST_COMPILER "${CMAKE_CXX_COMPILER}" CACHE FILEPATH "nvcc's host compiler")
endif()
# There is no GPU on the build machines: never "native". 90 = sm_90 code + compute_90 PTX.
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90 CACHE STRING "GPU architectures the plugin is compiled for")
endif()

check_language(CUDA)
set(PIPETRAIN_HAVE_CUDA_PLUGIN OFF)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "CUDA not found: building without the CUDA plugin")
  target_compile_definitions(pipetrain_engine PRIVATE
    PIPETRAIN_CUDA_PLUGIN_MISSING_REASON="nvcc not found at build time")
  return()
endif()

enable_language(CUDA)
# CMake 3.25 does not know C++20 for CUDA.
set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(CMAKE_CUDA_EXTENSIONS OFF)
set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)

find_package(CUDAToolkit REQUIRED)
# cuDNN and NCCL ship no CMake config.
find_library(PIPETRAIN_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
find_path(PIPETRAIN_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
find_library(PIPETRAIN_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
find_path(PIPETRAIN_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
foreach(var PIPETRAIN_CUDNN_LIBRARY PIPETRAIN_CUDNN_INCLUDE_DIR PIPETRAIN_NCCL_LIBRARY
            PIPETRAIN_NCCL_INCLUDE_DIR)
  if(NOT ${var})
    message(FATAL_ERROR "nvcc was found (${CMAKE_CUDA_COMPILER}) but ${var} was not: install "
      "cuDNN 9 and NCCL next to the CUDA toolkit, pass -D${var}=<path>, or configure with "
      "-DPIPETRAIN_CUDA=OFF")
  endif()
endforeach()
message(STATUS "CUDA plugin: nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures "
  "${CMAKE_CUDA_ARCHITECTURES}, cuDNN ${PIPETRAIN_CUDNN_LIBRARY}, NCCL ${PIPETRAIN_NCCL_LIBRARY}")

# ---- the plugin --------------------------------------------------------------------------
set(PIPETRAIN_CUDA_PLUGIN_DIR "${PROJECT_BINARY_DIR}/lib/pipetrain")
# kernels/cuda: the CUDA backend (the Backend class, its cuBLASLt GEMM and cuDNN convolution, its
# .cu kernels), beside the CPU backend in kernels/cpu. engine/cuda: the engine's side of the
# plugin (C entries, probe, self-test, NCCL communicator).
file(GLOB pipetrain_cuda_sources CONFIGURE_DEPENDS
  "${PROJECT_SOURCE_DIR}/engine/cuda/*.cpp" "${PROJECT_SOURCE_DIR}/kernels/cuda/*.cpp"
  "${PROJECT_SOURCE_DIR}/kernels/cuda/*.cu")
# The NCCL communicator shares the helpers every communicator uses (deadlines, rank lists).
list(APPEND pipetrain_cuda_sources "${PROJECT_SOURCE_DIR}/engine/comm/communicator.cpp")
add_library(pipetrain_cuda MODULE ${pipetrain_cuda_sources})
target_include_directories(pipetrain_cuda PRIVATE
  ${PROJECT_SOURCE_DIR} "${PROJECT_BINARY_DIR}/generated" ${PIPETRAIN_CUDNN_INCLUDE_DIR}
  ${PIPETRAIN_NCCL_INCLUDE_DIR})
# pipetrain_core (static, position-independent) gives the plugin the Backend base class and the
# caching allocator the CPU backend uses too. Never CUDA::cuda_driver (-lcuda): the runtime finds
# the driver itself, and its absence must be a message, not a load failure.
target_link_libraries(pipetrain_cuda PRIVATE pipetrain_core
  CUDA::cudart CUDA::cublasLt ${PIPETRAIN_CUDNN_LIBRARY} ${PIPETRAIN_NCCL_LIBRARY})
# The kernels include engine/core headers (Backend's parameter structs, counter-based randomness).
target_compile_options(pipetrain_cuda PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>)
set_target_properties(pipetrain_cuda PROPERTIES
  OUTPUT_NAME pipetrain_cuda                 # libpipetrain_cuda.so (PT_CUDA_PLUGIN_FILE_NAME)
  LIBRARY_OUTPUT_DIRECTORY "${PIPETRAIN_CUDA_PLUGIN_DIR}"
  CXX_VISIBILITY_PRESET hidden               # only pipetrain_cuda_plugin_api is exported
  CUDA_VISIBILITY_PRESET hidden
  VISIBILITY_INLINES_HIDDEN ON
  INSTALL_RPATH_USE_LINK_PATH ON)            # the installed plugin still finds the CUDA libraries
# Every symbol must resolve at link time: a call into the driver API (which we never link)
# fails here instead of at dlopen on a user's machine.
target_link_options(pipetrain_cuda PRIVATE "LINKER:--no-undefined")

# Warnings: the project's set for the C++ files, nvcc's host-compiler warnings for the .cu files.
pipetrain_warnings(pipetrain_cuda)
target_compile_options(pipetrain_cuda PRIVATE
  $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(PIPETRAIN_WERROR)
  target_compile_options(pipetrain_cuda PRIVATE
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Werror>)
endif()
# Sanitizer flags (added for every target by PipetrainHelpers) are host-compiler flags that nvcc
# rejects: keep them for the plugin's C++ files only.
get_target_property(pipetrain_cuda_options pipetrain_cuda COMPILE_OPTIONS)
if(pipetrain_cuda_options)
  set(options_for_cxx "")
  foreach(opt IN LISTS pipetrain_cuda_options)
    if(opt MATCHES "^-f(sanitize|no-omit-frame-pointer|no-sanitize)")
      list(APPEND options_for_cxx "$<$<COMPILE_LANGUAGE:CXX>:${opt}>")
    else()
      list(APPEND options_for_cxx "${opt}")
    endif()
  endforeach()
  set_property(TARGET pipetrain_cuda PROPERTY COMPILE_OPTIONS "${options_for_cxx}")
endif()

set(PIPETRAIN_HAVE_CUDA_PLUGIN ON)

# ---- where the engine's loader looks (engine/devices/cuda_plugin.cpp) --------------------------------
# Next to an executable in <dir>/lib/pipetrain or <dir>/../lib/pipetrain (the build tree: tests/,
# examples/ and bench/ sit next to lib/), <dir>/../<libdir>/pipetrain (an installed prefix), then
# PIPETRAIN_PLUGIN_INSTALL_DIR (set in CMakeLists.txt).
target_compile_definitions(pipetrain_engine PRIVATE
  PIPETRAIN_HAVE_CUDA_PLUGIN=1
  PIPETRAIN_PLUGIN_RELATIVE_LIBDIR="${CMAKE_INSTALL_LIBDIR}/pipetrain")
