// The CUDA plugin loader (engine/devices/cuda_plugin.h) on any machine: with or without the plugin,
// with or without a GPU, it answers with a status and one line, and never crashes.
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/cuda/plugin_abi.h"
#include "engine/devices/cuda_plugin.h"
#include "engine/devices/devices.h"

using namespace pt;
namespace fs = std::filesystem;

namespace {

// Sets (or unsets) an environment variable for one scope and restores it afterwards.
class EnvGuard {
 public:
  EnvGuard(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) {
      setenv(name, value, 1);
    } else {
      unsetenv(name);
    }
  }
  ~EnvGuard() {
    if (old_) {
      setenv(name_, old_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }
  EnvGuard(const EnvGuard&) = delete;
  EnvGuard& operator=(const EnvGuard&) = delete;

 private:
  const char* name_;
  std::optional<std::string> old_;
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

const std::string kUnavailable = "CUDA unavailable: ";

// The checks every status must pass, available or not.
void check_consistent(const CudaStatus& s) {
  INFO("message: " << s.message);
  CHECK(!s.message.empty());
  CHECK(s.message.find('\n') == std::string::npos);  // one line
  if (s.available) {
    CHECK(!starts_with(s.message, kUnavailable));
    REQUIRE(!s.devices.empty());
    CHECK(s.api != nullptr);
    for (size_t i = 0; i < s.devices.size(); ++i) {
      const CudaDeviceInfo& d = s.devices[i];
      CHECK(d.index == static_cast<int>(i));
      CHECK(!d.name.empty());
      CHECK(d.memory_bytes > 0);
      CHECK(d.cc_major >= 1);
      CHECK(starts_with(d.str(), "cuda:" + std::to_string(i) + " "));
    }
  } else {
    CHECK(starts_with(s.message, kUnavailable));
    CHECK(s.devices.empty());
    CHECK(s.api == nullptr);
  }
}

}  // namespace

TEST_CASE("cuda_status: probed once, consistent, never crashes") {
  const CudaStatus& s = cuda_status();
  CHECK(&s == &cuda_status());
  check_consistent(s);
  if (std::getenv("PIPETRAIN_CUDA_PLUGIN") != nullptr) {
    MESSAGE("PIPETRAIN_CUDA_PLUGIN is set: only the consistency of the status is checked");
    return;
  }
  INFO("message: " << s.message);
  if (s.available) {
    MESSAGE("CUDA available: " << s.message);
    for (const CudaDeviceInfo& d : s.devices) MESSAGE(d.str());
    CHECK(cuda_unavailable_line().empty());
    return;
  }
  CHECK(cuda_unavailable_line() == s.message + "; using the CPU backend");
#ifdef PIPETRAIN_TEST_CUDA_PLUGIN
  // The plugin was built, so the loader finds it next to the test (build/lib/pipetrain) and the
  // reason comes from the plugin's probe of the runtime.
  CHECK(fs::equivalent(s.plugin_path, PIPETRAIN_TEST_CUDA_PLUGIN));
  if (contains(s.message, "libcuda.so.1")) {
    // The GPU-less build machine: no driver library, so the plugin (and with it the CUDA
    // runtime, cuBLAS and cuDNN) was never loaded into this process.
    CHECK(contains(s.message, "no NVIDIA driver on this machine (libcuda.so.1 cannot be loaded: "));
    CHECK(contains(s.message, "the plugin " + s.plugin_path + " was not loaded"));
    std::ifstream maps("/proc/self/maps");
    const std::string mapped((std::istreambuf_iterator<char>(maps)),
                             std::istreambuf_iterator<char>());
    REQUIRE(!mapped.empty());
    for (const char* library : {"libpipetrain_cuda", "libcudart", "libcublas", "libcudnn"}) {
      CAPTURE(library);
      CHECK(!contains(mapped, library));
    }
  } else {
    // A driver is there: the reason comes from the plugin's probe of the runtime.
    CHECK(contains(s.message, "cudaGetDeviceCount failed with "));
  }
#else
  CHECK(contains(s.message, "pipetrain was built without the CUDA plugin ("));
  CHECK(s.plugin_path.empty());
#endif
}

TEST_CASE("cuda plugin search directories") {
  const std::vector<std::string> dirs = cuda_plugin_search_dirs();
#ifdef PIPETRAIN_TEST_CUDA_PLUGIN
  REQUIRE(dirs.size() >= 2);
  // The build tree: the plugin lives in <build>/lib/pipetrain, the test in <build>/tests.
  const fs::path plugin_dir = fs::path(PIPETRAIN_TEST_CUDA_PLUGIN).parent_path();
  bool found = false;
  for (const std::string& d : dirs) {
    std::error_code ec;
    found = found || fs::equivalent(d, plugin_dir, ec);
  }
  CHECK(found);
  for (size_t i = 0; i < dirs.size(); ++i) {
    for (size_t j = i + 1; j < dirs.size(); ++j) CHECK(dirs[i] != dirs[j]);
  }
#else
  CHECK(dirs.empty());
#endif
}

TEST_CASE("PIPETRAIN_CUDA_PLUGIN pointing at a missing file: cannot load, no fallback") {
  const std::string path = "/nonexistent/pipetrain/libpipetrain_cuda.so";
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", path.c_str());
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  CHECK(!s.available);
  CHECK(s.plugin_path == path);
  CHECK(starts_with(s.message, kUnavailable + "cannot load " + path + ": "));
  CHECK(contains(s.message, "No such file or directory"));
}

TEST_CASE("PIPETRAIN_CUDA_PLUGIN pointing at a file that is not a shared library") {
  const fs::path path = fs::temp_directory_path() / "pipetrain_test_not_elf.so";
  {
    std::FILE* f = std::fopen(path.c_str(), "w");
    REQUIRE(f != nullptr);
    std::fputs("this is not an ELF file\n", f);
    std::fclose(f);
  }
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", path.c_str());
  const CudaStatus s = probe_cuda();
  fs::remove(path);
  check_consistent(s);
  CHECK(starts_with(s.message, kUnavailable + "cannot load " + path.string() + ": "));
}

TEST_CASE("a shared library without the plugin's entry symbol") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_NOT_A_CUDA_PLUGIN);
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  CHECK(contains(s.message,
                 "is not a pipetrain CUDA plugin: it has no symbol "
                 "pipetrain_cuda_plugin_api"));
}

TEST_CASE("fake plugin: devices are listed when the probe succeeds") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  EnvGuard mode("PT_FAKE_CUDA_PLUGIN_MODE", "two_devices");
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  REQUIRE(s.available);
  CHECK(s.message == "CUDA runtime 99.0, driver 99.1: 2 devices");
  CHECK(s.plugin_path == PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  REQUIRE(s.devices.size() == 2);
  CHECK(s.devices[0].name == "Fake GPU A");
  CHECK(s.devices[1].memory_bytes == (size_t{160} << 30));
  CHECK(s.devices[1].cc_major == 9);
  CHECK(s.devices[1].cc_minor == 1);
  CHECK(s.devices[1].pci_bus_id == "0000:5e:00.0");
  CHECK(s.devices[0].str() == "cuda:0 Fake GPU A (80.0 GiB, sm_90, 132 SMs)");
  REQUIRE(s.api != nullptr);
  char message[64] = {};
  CHECK(s.api->self_test(0, message, sizeof(message)) == PT_CUDA_OK);
}

TEST_CASE("fake plugin: the probe's reason becomes the message") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  EnvGuard mode("PT_FAKE_CUDA_PLUGIN_MODE", "no_driver");
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  CHECK(s.message == "CUDA unavailable: fake: no driver");
}

TEST_CASE("fake plugin: a failing device query makes CUDA unavailable, naming the device") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  EnvGuard mode("PT_FAKE_CUDA_PLUGIN_MODE", "device_error");
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  CHECK(s.message == "CUDA unavailable: fake: cudaGetDeviceProperties(cuda:1) failed");
}

TEST_CASE("fake plugin: a different ABI version is refused") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  EnvGuard mode("PT_FAKE_CUDA_PLUGIN_MODE", "bad_abi");
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  CHECK(contains(s.message, "speaks plugin ABI version 999 but this engine needs version " +
                                std::to_string(PT_CUDA_PLUGIN_ABI_VERSION)));
}

TEST_CASE("fake plugin: a NULL function table is refused") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  EnvGuard mode("PT_FAKE_CUDA_PLUGIN_MODE", "null_table");
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  CHECK(contains(s.message, "pipetrain_cuda_plugin_api() returned NULL"));
}

#ifdef PIPETRAIN_TEST_CUDA_PLUGIN
TEST_CASE("the real plugin by explicit path gives the same answer as the search") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_CUDA_PLUGIN);
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  CHECK(s.available == cuda_status().available);
  CHECK(s.devices.size() == cuda_status().devices.size());
  if (contains(cuda_status().message, "libcuda.so.1")) {
    // The search stopped before loading the plugin (no driver); loaded anyway, the plugin's own
    // probe of the runtime finds the same absence.
    CHECK(contains(s.message, "cudaErrorInsufficientDriver (35): "));
  } else {
    CHECK(s.message == cuda_status().message);
  }
}
#endif

// ---- backends from the plugin (the fake hands out CPU backends cpu:(10 * gpu + slot)) --------

TEST_CASE("fake plugin: make_cuda_backend owns what the plugin created, one slot per call") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  EnvGuard mode("PT_FAKE_CUDA_PLUGIN_MODE", "two_devices");
  const CudaStatus s = probe_cuda();
  REQUIRE(s.available);
  auto first = make_cuda_backend(1, 0, CudaPrecision::fp32, s);
  auto second = make_cuda_backend(1, 1, CudaPrecision::bf16, s);
  CHECK(first->device().index == 10);
  CHECK(second->device().index == 11);
  // The object works through the interface (memory accounting of the fake's CPU backend).
  void* p = second->allocate(100);
  CHECK(second->memory_stats().current_bytes == 100);
  second->deallocate(p, 100);
  try {
    (void)make_cuda_backend(2, 0, CudaPrecision::fp32, s);
    FAIL("cuda:2 does not exist on the fake's two GPUs");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()) == "cannot open cuda:2: this machine has 2 GPUs (cuda:0..cuda:1)");
  }
}

TEST_CASE("fake plugin: a backend the plugin cannot create is a usage error with its reason") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  EnvGuard mode("PT_FAKE_CUDA_PLUGIN_MODE", "backend_error");
  const CudaStatus s = probe_cuda();
  REQUIRE(s.available);
  try {
    (void)make_cuda_backend(0, 0, CudaPrecision::fp32, s);
    FAIL("the fake refuses");
  } catch (const UsageError& e) {
    CHECK(std::string(e.what()) ==
          "cannot open cuda:0: fake: cudaStreamCreate failed with cudaErrorMemoryAllocation (2)");
  }
}

TEST_CASE("fake plugin: a plugin from another build is refused before any object crosses") {
  EnvGuard env("PIPETRAIN_CUDA_PLUGIN", PIPETRAIN_TEST_FAKE_CUDA_PLUGIN);
  EnvGuard mode("PT_FAKE_CUDA_PLUGIN_MODE", "other_build");
  const CudaStatus s = probe_cuda();
  check_consistent(s);
  CHECK(contains(s.message,
                 "was built from other sources or by another compiler (plugin build "
                 "0.0.0-someotherbuild, engine build "));
  CHECK(contains(s.message, "rebuild and reinstall pipetrain"));
  CHECK_THROWS_AS((void)make_cuda_backend(0, 0, CudaPrecision::fp32, s), UsageError);
}

TEST_CASE("precision names and device lists that cannot work") {
  CHECK(parse_precision("bf16") == CudaPrecision::bf16);
  CHECK(std::string(precision_name(CudaPrecision::tf32)) == "tf32");
  CHECK_THROWS_WITH_AS(parse_precision("fp16"), "unknown precision 'fp16': use fp32, tf32 or bf16",
                       UsageError);
  CHECK_THROWS_WITH_AS(
      open_devices("cpu:0", 1, 1, CudaPrecision::bf16),
      "--precision bf16 needs CUDA devices (the CPU backend computes in fp32): use "
      "--precision fp32 or --devices cuda:N",
      UsageError);
  CHECK_THROWS_WITH_AS(
      open_devices("cpu:0,cuda:0", 2, 1),
      "--devices cpu:0,cuda:0 mixes CPU and CUDA devices: use only cpu:N or only cuda:N",
      UsageError);
  CHECK_THROWS_WITH_AS(open_devices("cpu:1,cpu:1", 2, 1),
                       "device cpu:1 is listed twice in --devices cpu:1,cpu:1", UsageError);
}

TEST_CASE("attention kernel names, and cuDNN's asked of the CPU") {
  for (AttentionKernel a : {AttentionKernel::automatic, AttentionKernel::native,
                            AttentionKernel::cudnn, AttentionKernel::cudnn_deterministic})
    CHECK(parse_attention(attention_name(a)) == a);
  CHECK(std::string(attention_name(AttentionKernel::cudnn_deterministic)) == "cudnn-deterministic");
  CHECK_THROWS_WITH_AS(parse_attention("flash"),
                       "unknown attention kernel 'flash': use auto, native, cudnn or "
                       "cudnn-deterministic",
                       UsageError);
  for (AttentionKernel a : {AttentionKernel::cudnn, AttentionKernel::cudnn_deterministic})
    CHECK_THROWS_WITH_AS(
        open_devices("cpu:0", 1, 1, CudaPrecision::fp32, a),
        fmt::format("--attention {} needs CUDA devices (cuDNN's fused flash attention); the CPU "
                    "backend has one attention kernel: use --attention auto or native, or "
                    "--devices cuda:N",
                    attention_name(a))
            .c_str(),
        UsageError);
  // auto and native are what the CPU has: they open.
  for (AttentionKernel a : {AttentionKernel::automatic, AttentionKernel::native})
    CHECK(open_devices("cpu:0", 1, 1, CudaPrecision::fp32, a).backends.size() == 1);
}
