// The backend registry (engine/core/backend_registry.h). This binary never refers to the CPU
// backend's class: finding "cpu" registered proves that its registration object is linked.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "engine/core/backend_registry.h"
#include "engine/core/error.h"

using namespace pt;

namespace {

bool registered(const std::string& kind) {
  const auto kinds = registered_backend_kinds();
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

std::string error_of(const std::string& kind, const BackendOptions& options = {}) {
  try {
    open_backend(kind, options);
  } catch (const UsageError& e) {
    return e.what();
  }
  return {};
}

}  // namespace

TEST_CASE("backend registry: the CPU backend registers itself") {
  REQUIRE(registered("cpu"));
  BackendOptions options;
  options.index = 3;
  options.threads = 1;
  auto cpu = open_backend("cpu", options);
  CHECK(cpu->device().str() == "cpu:3");
  CHECK(cpu->num_threads() == 1);
  CHECK(cpu->host_accessible());
}

TEST_CASE("backend registry: an unknown kind names the known ones") {
  BackendOptions options;
  options.index = 1;
  const std::string message = error_of("tpu", options);
  CHECK(message.find("cannot open tpu:1") != std::string::npos);
  CHECK(message.find("no backend for device kind 'tpu'") != std::string::npos);
  std::string known;
  for (const std::string& kind : registered_backend_kinds())
    known += (known.empty() ? "" : ", ") + kind;
  CHECK(message.find("(known kinds: " + known + ")") != std::string::npos);
  CHECK(known.find("cpu") != std::string::npos);
}

TEST_CASE("backend registry: the factory's own errors come through") {
  BackendOptions options;
  options.precision = Precision::bf16;
  CHECK(error_of("cpu", options).find("cpu:0: the CPU backend computes in fp32 only") !=
        std::string::npos);
  options.precision = Precision::fp32;
  options.threads = 0;
  CHECK(error_of("cpu", options).find("thread count must be at least 1") != std::string::npos);
}

TEST_CASE("backend registry: a new kind is one registration; a kind is registered once") {
  static int opened = 0;  // the factory stays registered after this test
  register_backend("test-registry-kind", [](const BackendOptions& o) {
    ++opened;
    BackendOptions cpu = o;
    cpu.index = 40 + o.index;
    return open_backend("cpu", cpu);
  });
  CHECK(registered("test-registry-kind"));
  BackendOptions options;
  options.index = 2;
  CHECK(open_backend("test-registry-kind", options)->device().str() == "cpu:42");
  CHECK(opened == 1);
  CHECK_THROWS_WITH_AS(
      register_backend("cpu", [](const BackendOptions&) { return std::unique_ptr<Backend>(); }),
      "a backend for device kind 'cpu' is registered twice", UsageError);
  CHECK_THROWS_AS(
      register_backend("", [](const BackendOptions&) { return std::unique_ptr<Backend>(); }),
      UsageError);
}
