// Loading the CUDA plugin: find the .so, dlopen it, check its ABI, probe, list devices. Every
// failure becomes CudaStatus::message; nothing here throws or includes a CUDA header.
#include "engine/devices/cuda_plugin.h"

#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <memory>
#include <string_view>
#include <system_error>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "engine/core/backend_registry.h"
#include "engine/core/error.h"
#include "engine/cuda/plugin_abi.h"
#include "pipetrain/build_id.h"

#ifndef PIPETRAIN_CUDA_PLUGIN_MISSING_REASON
#define PIPETRAIN_CUDA_PLUGIN_MISSING_REASON "configured with -DPIPETRAIN_CUDA=OFF"
#endif

namespace pt {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kUnavailable = "CUDA unavailable: ";
constexpr size_t kMessageSize = 1024;

CudaStatus unavailable(std::string reason, std::string plugin_path = {}) {
  CudaStatus s;
  s.message = std::string(kUnavailable) + reason;
  s.plugin_path = std::move(plugin_path);
  return s;
}

// dlerror() usually starts with the path we just passed; say it once.
std::string dl_error_for(const std::string& path) {
  const char* err = dlerror();
  std::string text = err != nullptr ? err : "unknown dlopen error";
  const std::string prefix = path + ": ";
  if (text.starts_with(prefix)) text.erase(0, prefix.size());
  return text;
}

#ifdef PIPETRAIN_HAVE_CUDA_PLUGIN
// The directory of the running executable, or empty if /proc/self/exe cannot be read.
fs::path executable_dir() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  return exe.parent_path();
}
#endif

// Loads the plugin at `path` and checks that it speaks our ABI. On failure returns nullptr
// and sets `reason`.
const PtCudaPluginApi* load_plugin(const std::string& path, std::string& reason) {
  // RTLD_NOW: a missing CUDA library or symbol fails here, with dlerror naming it.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    reason = fmt::format("cannot load {}: {}", path, dl_error_for(path));
    return nullptr;
  }
  // Never dlclose: the CUDA runtime registers exit handlers inside the plugin's libraries.
  dlerror();
  void* symbol = dlsym(handle, PT_CUDA_PLUGIN_ENTRY);
  if (symbol == nullptr) {
    reason = fmt::format("{} is not a pipetrain CUDA plugin: it has no symbol {} ({})", path,
                         PT_CUDA_PLUGIN_ENTRY, dl_error_for(path));
    return nullptr;
  }
  PtCudaPluginEntryFn entry = nullptr;
  static_assert(sizeof(entry) == sizeof(symbol));
  std::memcpy(&entry, &symbol, sizeof(entry));  // object pointer -> function pointer (POSIX)
  const PtCudaPluginApi* api = entry();
  if (api == nullptr) {
    reason = fmt::format("{}: {}() returned NULL", path, PT_CUDA_PLUGIN_ENTRY);
    return nullptr;
  }
  if (api->abi_version != PT_CUDA_PLUGIN_ABI_VERSION) {
    reason = fmt::format(
        "{} speaks plugin ABI version {} but this engine needs version {}: rebuild and "
        "reinstall pipetrain so that the engine and its plugin match",
        path, api->abi_version, PT_CUDA_PLUGIN_ABI_VERSION);
    return nullptr;
  }
  const size_t needed = offsetof(PtCudaPluginApi, device_info) + sizeof(api->device_info);
  if (api->struct_size < needed || api->probe == nullptr || api->device_info == nullptr) {
    reason = fmt::format("{} has an incomplete function table ({} bytes, need {})", path,
                         api->struct_size, needed);
    return nullptr;
  }
  // From ABI 2 the plugin hands out C++ objects: only safe from the same sources and compiler.
  const size_t with_objects =
      offsetof(PtCudaPluginApi, create_backend) + sizeof(api->create_backend);
  if (api->struct_size < with_objects || api->build_id == nullptr ||
      api->create_backend == nullptr) {
    reason = fmt::format(
        "{} has no create_backend entry ({} bytes, need {}): rebuild and reinstall pipetrain", path,
        api->struct_size, with_objects);
    return nullptr;
  }
  if (std::string_view(api->build_id) != PIPETRAIN_BUILD_ID) {
    reason = fmt::format(
        "{} was built from other sources or by another compiler (plugin build {}, engine build "
        "{}): "
        "rebuild and reinstall pipetrain so that the engine and its plugin match",
        path, api->build_id, PIPETRAIN_BUILD_ID);
    return nullptr;
  }
  return api;
}

// Asks a loaded plugin for the runtime and its devices.
CudaStatus probe_plugin(const PtCudaPluginApi* api, const std::string& path) {
  char message[kMessageSize] = {};
  int count = 0;
  const int rc = api->probe(message, sizeof(message), &count);
  if (rc != PT_CUDA_OK || count <= 0) {
    return unavailable(message[0] != '\0' ? message : "the plugin's probe found no GPU", path);
  }
  CudaStatus s;
  s.plugin_path = path;
  for (int d = 0; d < count; ++d) {
    PtCudaDeviceInfo info{};
    char info_message[kMessageSize] = {};
    if (api->device_info(d, &info, info_message, sizeof(info_message)) != PT_CUDA_OK) {
      return unavailable(info_message, path);
    }
    info.name[sizeof(info.name) - 1] = '\0';
    CudaDeviceInfo dev;
    dev.index = d;
    dev.name = info.name;
    dev.memory_bytes = static_cast<size_t>(info.memory_bytes);
    dev.cc_major = info.cc_major;
    dev.cc_minor = info.cc_minor;
    dev.multiprocessors = info.multiprocessors;
    info.pci_bus_id[sizeof(info.pci_bus_id) - 1] = '\0';
    dev.pci_bus_id = info.pci_bus_id;
    s.devices.push_back(std::move(dev));
  }
  s.available = true;
  s.api = api;
  s.message = fmt::format("{}: {} device{}", message, count, count == 1 ? "" : "s");
  return s;
}

}  // namespace

// Device kind "cuda" in the backend registry (engine/core/backend_registry.h): opening a GPU
// loads and probes the plugin on first use. This file is in every program that opens devices,
// since engine/devices/devices.cpp calls cuda_status(); the registry, a function-local static, is
// built by whichever registration runs first.
namespace {
const BackendRegistration cuda_registration("cuda", [](const BackendOptions& options) {
  return make_cuda_backend(options);
});
}  // namespace

std::string CudaDeviceInfo::str() const {
  const double gib = static_cast<double>(memory_bytes) / (1024.0 * 1024.0 * 1024.0);
  return fmt::format("cuda:{} {} ({:.1f} GiB, sm_{}{}, {} SMs)", index, name, gib, cc_major,
                     cc_minor, multiprocessors);
}

std::vector<std::string> cuda_plugin_search_dirs() {
#ifdef PIPETRAIN_HAVE_CUDA_PLUGIN
  std::vector<fs::path> candidates;
  const fs::path exe_dir = executable_dir();
  if (!exe_dir.empty()) {
    candidates.push_back(exe_dir / "lib" / "pipetrain");
    candidates.push_back(exe_dir / ".." / "lib" / "pipetrain");
    candidates.push_back(exe_dir / ".." / PIPETRAIN_PLUGIN_RELATIVE_LIBDIR);
  }
  candidates.emplace_back(PIPETRAIN_PLUGIN_INSTALL_DIR);
  std::vector<std::string> dirs;
  for (const fs::path& c : candidates) {
    std::string dir = c.lexically_normal().string();
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    bool seen = false;
    for (const std::string& d : dirs) seen = seen || d == dir;
    if (!seen) dirs.push_back(std::move(dir));
  }
  return dirs;
#else
  return {};
#endif
}

CudaStatus probe_cuda() {
  try {
    std::string path;
    const char* env = std::getenv("PIPETRAIN_CUDA_PLUGIN");
    if (env != nullptr && env[0] != '\0') {
      path = env;  // explicit: no search, no fallback
    } else {
#ifndef PIPETRAIN_HAVE_CUDA_PLUGIN
      return unavailable("pipetrain was built without the CUDA plugin (" +
                         std::string(PIPETRAIN_CUDA_PLUGIN_MISSING_REASON) + ")");
#else
      const std::vector<std::string> dirs = cuda_plugin_search_dirs();
      for (const std::string& dir : dirs) {
        const std::string file = dir + "/" + PT_CUDA_PLUGIN_FILE_NAME;
        std::error_code ec;
        if (fs::exists(file, ec)) {
          path = file;
          break;
        }
      }
      if (path.empty()) {
        std::string list;
        for (const std::string& dir : dirs) list += (list.empty() ? "" : ", ") + dir;
        return unavailable(fmt::format(
            "cannot load {}: not found in {} (set PIPETRAIN_CUDA_PLUGIN to its full path)",
            PT_CUDA_PLUGIN_FILE_NAME, list));
      }
#endif
    }
#ifdef PIPETRAIN_HAVE_CUDA_PLUGIN
    if (env == nullptr || env[0] == '\0') {
      // Without the driver's library no GPU can be used. Loading the plugin only to hear that
      // from cudaGetDeviceCount pulls in the CUDA runtime, cuBLAS and cuDNN (about 190 MB of
      // resident memory and 1.2 s here) for every CPU user of --devices auto; dlopen of
      // libcuda.so.1 alone answers in microseconds. On a GPU machine the handle stays open: the
      // runtime loads the same library anyway. (An explicit PIPETRAIN_CUDA_PLUGIN is always
      // loaded: the loader tests point it at fake plugins on machines without a driver.)
      if (dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL) == nullptr)
        return unavailable(
            fmt::format("no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded: {}); "
                        "the plugin {} was not loaded",
                        dl_error_for("libcuda.so.1"), path),
            path);
    }
#endif
    std::string reason;
    const PtCudaPluginApi* api = load_plugin(path, reason);
    if (api == nullptr) return unavailable(reason, path);
    return probe_plugin(api, path);
  } catch (const std::exception& e) {
    return unavailable(std::string("probing the CUDA plugin failed: ") + e.what());
  }
}

const CudaStatus& cuda_status() {
  static const CudaStatus status = probe_cuda();  // initialised once, thread-safe
  return status;
}

std::string cuda_unavailable_line() {
  const CudaStatus& s = cuda_status();
  if (s.available) return {};
  return s.message + "; using the CPU backend";
}

std::unique_ptr<Backend> make_cuda_backend(int device, int slot, CudaPrecision precision,
                                           const CudaStatus& cuda) {
  BackendOptions options;
  options.index = device;
  options.slot = slot;
  options.precision = precision;
  return make_cuda_backend(options, cuda);
}

std::unique_ptr<Backend> make_cuda_backend(const BackendOptions& backend_options,
                                           const CudaStatus& cuda) {
  const int device = backend_options.index;
  const std::string name = fmt::format("cuda:{}", device);
  if (!cuda.available) throw UsageError(fmt::format("cannot open {}: {}", name, cuda.message));
  if (device < 0 || device >= static_cast<int>(cuda.devices.size()))
    throw UsageError(fmt::format("cannot open {}: this machine has {} GPU{} (cuda:0..cuda:{})",
                                 name, cuda.devices.size(), cuda.devices.size() == 1 ? "" : "s",
                                 static_cast<int>(cuda.devices.size()) - 1));
  PtCudaBackendOptions options{device, backend_options.slot,
                               static_cast<int>(backend_options.precision),
                               static_cast<int>(backend_options.attention)};
  void* out = nullptr;
  char message[kMessageSize] = {};
  const int rc = cuda.api->create_backend(&options, &out, message, sizeof(message));
  if (rc != PT_CUDA_OK || out == nullptr)
    throw UsageError(fmt::format("cannot open {}: {}", name,
                                 message[0] != '\0' ? message : "the plugin failed"));
  return std::unique_ptr<Backend>(static_cast<Backend*>(out));
}

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& bootstrap, Backend& backend,
                                                     const std::string& name) {
  const CudaStatus& cuda = cuda_status();
  // [0] = 1 when rank 0 drew an id; the id follows. Rank 0 always broadcasts, so that a failure
  // there becomes an error on every rank instead of a wait.
  std::array<unsigned char, 129> id{};
  char message[kMessageSize] = {};
  if (bootstrap.rank() == 0) {
    if (!cuda.available || cuda.api->nccl_unique_id == nullptr)
      std::snprintf(message, sizeof(message), "%s",
                    cuda.available ? "the plugin has no NCCL" : cuda.message.c_str());
    else if (cuda.api->nccl_unique_id(id.data() + 1, message, sizeof(message)) == PT_CUDA_OK)
      id[0] = 1;
  }
  bootstrap.broadcast(id.data(), id.size(), 0, fmt::format("the NCCL unique id of '{}'", name));
  if (id[0] != 1)
    throw UsageError(
        fmt::format("cannot create NCCL communicator '{}': {}", name,
                    bootstrap.rank() == 0 ? message : "rank 0 could not draw an NCCL unique id"));
  if (!cuda.available || cuda.api->create_nccl_communicator == nullptr)
    throw UsageError(fmt::format("cannot create NCCL communicator '{}': {}", name,
                                 cuda.available ? "the plugin has no NCCL" : cuda.message));
  std::vector<int> world_ranks;
  for (int r = 0; r < bootstrap.size(); ++r) world_ranks.push_back(bootstrap.world_rank(r));
  void* out = nullptr;
  const int rc = cuda.api->create_nccl_communicator(
      id.data() + 1, bootstrap.size(), bootstrap.rank(), world_ranks.data(), name.c_str(), &backend,
      bootstrap.timeout_s(), &out, message, sizeof(message));
  if (rc != PT_CUDA_OK || out == nullptr)
    throw UsageError(fmt::format("cannot create NCCL communicator '{}': {}", name, message));
  return std::unique_ptr<Communicator>(static_cast<Communicator*>(out));
}

bool nccl_usable(Communicator& group, Backend& backend) {
  const CudaStatus& cuda = cuda_status();
  // Every rank takes part in the all-gather, whatever it finds locally. A GPU is named by its
  // host and PCI bus id: with CUDA_VISIBLE_DEVICES set per rank, every rank's GPU is "cuda:0".
  struct Place {
    char host[64] = {};
    char gpu[32] =
        {};  // PCI bus id, or "#<index>" when unknown; empty: no CUDA device (or no NCCL)
  } mine;
  gethostname(mine.host, sizeof(mine.host) - 1);
  const int index = backend.device().index;
  if (cuda.available && cuda.api->create_nccl_communicator != nullptr &&
      backend.device().kind == DeviceKind::cuda && index >= 0 &&
      index < static_cast<int>(cuda.devices.size())) {
    const std::string& bus = cuda.devices[static_cast<size_t>(index)].pci_bus_id;
    std::snprintf(mine.gpu, sizeof(mine.gpu), "%s",
                  bus.empty() ? fmt::format("#{}", index).c_str() : bus.c_str());
  }
  std::vector<Place> all(static_cast<size_t>(group.size()));
  group.all_gather(&mine, all.data(), sizeof(Place), "where each rank's GPU is (for NCCL)");
  const auto same = [](const char* a, const char* b, size_t n) {
    return std::strncmp(a, b, n) == 0;
  };
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i].gpu[0] == '\0') return false;
    for (size_t j = 0; j < i; ++j)
      if (same(all[i].gpu, all[j].gpu, sizeof(Place::gpu)) &&
          same(all[i].host, all[j].host, sizeof(Place::host)))
        return false;
  }
  return true;
}

const char* precision_name(CudaPrecision p) {
  switch (p) {
    case CudaPrecision::tf32: return "tf32";
    case CudaPrecision::bf16: return "bf16";
    default: return "fp32";
  }
}

CudaPrecision parse_precision(std::string_view text) {
  if (text == "fp32") return CudaPrecision::fp32;
  if (text == "tf32") return CudaPrecision::tf32;
  if (text == "bf16") return CudaPrecision::bf16;
  throw UsageError(fmt::format("unknown precision '{}': use fp32, tf32 or bf16", text));
}

AttentionKernel parse_attention(std::string_view text) {
  for (AttentionKernel a : {AttentionKernel::automatic, AttentionKernel::native,
                            AttentionKernel::cudnn, AttentionKernel::cudnn_deterministic})
    if (text == attention_name(a)) return a;
  throw UsageError(fmt::format(
      "unknown attention kernel '{}': use auto, native, cudnn or cudnn-deterministic", text));
}

}  // namespace pt
