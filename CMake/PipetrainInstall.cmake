# Installs the libraries, headers and the exported pipetrain::pipetrain target, so that a user's
# own CMake project can do find_package(pipetrain) and link pipetrain::pipetrain.
include(CMakePackageConfigHelpers)

get_property(pipetrain_libs GLOBAL PROPERTY PIPETRAIN_LIBRARIES)
install(TARGETS ${pipetrain_libs} pipetrain EXPORT pipetrainTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pipetrain)
foreach(dir engine layers schedule kernels)
  install(DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/pipetrain
    FILES_MATCHING PATTERN "*.h" PATTERN "cuda" EXCLUDE)
endforeach()
install(EXPORT pipetrainTargets NAMESPACE pipetrain:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pipetrain)
configure_package_config_file(${PROJECT_SOURCE_DIR}/CMake/pipetrainConfig.cmake.in
  ${PROJECT_BINARY_DIR}/pipetrainConfig.cmake INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pipetrain)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pipetrainConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pipetrainConfig.cmake ${PROJECT_BINARY_DIR}/pipetrainConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/pipetrain)

# The CUDA plugin (when built): not part of the export, nothing links it; the engine dlopen()s it
# from <libdir>/pipetrain (see engine/devices/cuda_plugin.h for where it looks).
if(TARGET pipetrain_cuda)
  install(TARGETS pipetrain_cuda LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/pipetrain)
endif()
