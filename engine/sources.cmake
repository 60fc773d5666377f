# Included by pipetrain_library(pipetrain_engine engine ...): the sub-folders of engine/ that are
# part of the engine library itself (engine/core and engine/cuda are their own libraries).
file(GLOB extra CONFIGURE_DEPENDS
  "${CMAKE_CURRENT_SOURCE_DIR}/engine/data/*.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/engine/io/*.cpp"
  "${CMAKE_CURRENT_SOURCE_DIR}/engine/checkpoint/*.cpp")
list(APPEND sources ${extra})
file(GLOB pipeline_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/engine/pipeline/*.cpp")
list(APPEND sources ${pipeline_sources})
# engine/trace: execution traces (Chrome/Perfetto JSON, bubble measurement, SVG timelines).
file(GLOB trace_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/engine/trace/*.cpp")
list(APPEND sources ${trace_sources})
file(GLOB partition_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/engine/partition/*.cpp")
list(APPEND sources ${partition_sources})
# engine/parallel: the data-parallel axis (device mesh, gradient buckets and their reduction).
file(GLOB parallel_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/engine/parallel/*.cpp")
list(APPEND sources ${parallel_sources})
# engine/comm: communicators (in-process threads, MPI processes) for transfers between processes
# and the data-parallel gradient reduction.
file(GLOB comm_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/engine/comm/*.cpp")
# One of the two MPI implementations: the real one, or the one that says MPI is not built in.
if(PIPETRAIN_MPI)
  list(FILTER comm_sources EXCLUDE REGEX "/mpi_missing\\.cpp$")
else()
  list(FILTER comm_sources EXCLUDE REGEX "/mpi\\.cpp$")
endif()
list(APPEND sources ${comm_sources})
# engine/setup: the library entry point (options -> devices -> plan -> training engine; main()).
file(GLOB setup_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/engine/setup/*.cpp")
list(APPEND sources ${setup_sources})
