# Included by pipetrain_library(pipetrain_engine engine ...): engine/ has no source files of its
# own, only folders, one job each (ARCHITECTURE.md draws their layers; scripts/check-includes.sh
# enforces which may include which). engine/core and engine/cuda are libraries of their own.
set(engine_folders
  io          # files: atomic writes, CRC, safetensors, text fields, output paths
  data        # datasets and batching
  comm        # communicators: in-process threads, MPI processes, the recording wrapper
  process     # process plumbing: signals on their own thread, preemption, the version
  report      # what a run measures and reports: metrics lines, progress, step clock, memory
  devices     # opening devices through the backend registry; the CUDA plugin loader
  optim       # optimizers and learning-rate schedules
  train       # the single-device reference trainer, the forward pass, the step epilogue
  partition   # layer costs and the partitioner
  trace       # execution traces, bubbles, the flight recorder
  parallel    # the data-parallel axis: gradient buckets and reduction, parameter server, shards
  parallel/full_shard  # full sharding (ZeRO-3 / FSDP): units gathered around their compute
  checkpoint  # saving and loading checkpoints in any layout
  update      # update strategies: what happens at a step's boundary and to a stage's gradients
  pipeline    # the pipeline runtime: executor, transport, skip routing, the pipeline trainer
  replicas    # R pipeline replicas: in one process or one per process, with parameter servers
  plan        # plans: partition + schedule + micro-batches, the automatic planner, clusters
  loop        # the training loop over epochs: fit()
  inference   # sampling text from a trained model
  setup       # the entry point: options -> devices -> plan -> training engine; main()
)
foreach(folder IN LISTS engine_folders)
  file(GLOB folder_sources CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/engine/${folder}/*.cpp")
  list(APPEND sources ${folder_sources})
endforeach()
# One of the two MPI implementations: the real one, or the one that says MPI is not built in.
if(PIPETRAIN_MPI)
  list(FILTER sources EXCLUDE REGEX "/engine/comm/mpi_missing\\.cpp$")
else()
  list(FILTER sources EXCLUDE REGEX "/engine/comm/mpi(_collectives|_point_to_point)?\\.cpp$")
endif()
