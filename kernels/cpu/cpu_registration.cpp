// Registers the CPU backend as device kind "cpu" (see engine/core/backend_registry.h). Nothing
// refers to this object: pipetrain_engine links pipetrain_kernels_cpu as a whole archive so that
// it is in every program, and it registers during static initialisation.
#include <fmt/format.h>

#include "engine/core/backend_registry.h"
#include "engine/core/error.h"
#include "kernels/cpu/cpu_backend.h"

namespace pt {

namespace {

std::unique_ptr<Backend> open_cpu(const BackendOptions& options) {
  if (options.precision != Precision::fp32)
    throw UsageError(
        fmt::format("cannot open cpu:{}: the CPU backend computes in fp32 only", options.index));
  return make_cpu_backend(options.index, options.threads);
}

const BackendRegistration registration("cpu", open_cpu);

}  // namespace

}  // namespace pt
