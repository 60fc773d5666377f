// Loading the CUDA plugin: find the .so, dlopen it, check its ABI, probe, list devices. Every
// failure becomes CudaStatus::message; nothing here throws or includes a CUDA header.
#include "engine/cuda_plugin.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string_view>
#include <system_error>
#include <utility>

#include <fmt/format.h>

#include "engine/cuda/plugin_abi.h"

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
    s.devices.push_back(std::move(dev));
  }
  s.available = true;
  s.api = api;
  s.message = fmt::format("{}: {} device{}", message, count, count == 1 ? "" : "s");
  return s;
}

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

}  // namespace pt
