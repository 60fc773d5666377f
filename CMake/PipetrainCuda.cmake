# The CUDA plugin: built when nvcc is found (see engine/cuda/). Filled in by the CUDA work.
