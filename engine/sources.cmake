# Included by pipetrain_library(pipetrain_engine engine ...): the sub-folders of engine/ that are
# part of the engine library itself (engine/core and engine/cuda are their own libraries).
file(GLOB extra CONFIGURE_DEPENDS
  "${CMAKE_CURRENT_SOURCE_DIR}/engine/data/*.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/engine/io/*.cpp")
list(APPEND sources ${extra})
