#pragma once
// Backends by kind name ("cpu", "cuda", ...), as in ggml's backend registry: each backend
// registers a factory for its kind, and the engine opens devices through the registry, never
// naming a backend's class or including its headers.
//
// How each backend gets here, robust against static-initialisation order and against static
// libraries dropping objects that nothing references:
// - the registry is a function-local static, built on first use, so a registration that runs
//   during static initialisation, in whatever order, finds it;
// - the CPU backend registers with a namespace-scope BackendRegistration object in its own
//   folder (cpu_registration.cpp). Nothing refers to that object, so pipetrain_engine links
//   pipetrain_kernels_cpu as a whole archive (CMakeLists.txt): every program that links the
//   engine contains the object, and it registers "cpu" before main();
// - the CUDA backend lives in a plugin loaded at run time (dlopen): the engine's loader,
//   engine/devices/cuda_plugin.cpp, registers "cuda", whose factory loads the plugin on first use.
// A third backend is a folder with its Backend class and one BackendRegistration, built as a
// library linked like pipetrain_kernels_cpu (or a plugin whose loader registers it).
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/core/backend.h"

namespace pt {

// What a factory is asked to open.
struct BackendOptions {
  int index = 0;  // the device: <kind>:<index>
  // 0 for the first backend opened on this device, 1 for the next: kinds whose devices may be
  // shared (several stages on one GPU) give each slot its own queues and memory accounting.
  int slot = 0;
  int threads = 1;  // threads for ops that run on host threads (>= 1)
  Precision precision = Precision::fp32;
  AttentionKernel attention = AttentionKernel::automatic;
};

// Opens one device; throws UsageError naming the device and the reason.
using BackendFactory = std::function<std::unique_ptr<Backend>(const BackendOptions&)>;

// Registers `factory` for `kind`. Throws UsageError if `kind` is empty or already registered.
// Thread-safe.
void register_backend(std::string kind, BackendFactory factory);

// Opens device options.index of `kind`. Throws UsageError naming the registered kinds when no
// backend is registered for `kind`, and whatever the factory throws otherwise.
std::unique_ptr<Backend> open_backend(std::string_view kind, const BackendOptions& options);

// The registered kinds, sorted ("cpu", "cuda").
std::vector<std::string> registered_backend_kinds();

// A namespace-scope object of this type registers a backend during static initialisation.
struct BackendRegistration {
  BackendRegistration(std::string kind, BackendFactory factory) {
    register_backend(std::move(kind), std::move(factory));
  }
};

}  // namespace pt
