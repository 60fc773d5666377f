# Included by pipetrain_library(pipetrain_layers layers ...): the layers, and the folder of the
# tensor-parallel pieces (layers/tensor_parallel/: the group layers call, parameter slices,
# column- and row-parallel linears, the vocab-parallel embedding and loss, sharding a model).
file(GLOB tensor_parallel_sources CONFIGURE_DEPENDS
  "${CMAKE_CURRENT_SOURCE_DIR}/layers/tensor_parallel/*.cpp")
list(APPEND sources ${tensor_parallel_sources})
