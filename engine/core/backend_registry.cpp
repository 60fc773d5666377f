#include "engine/core/backend_registry.h"

#include <map>
#include <mutex>
#include <utility>

#include <fmt/format.h>

#include "engine/core/error.h"

namespace pt {

namespace {

struct Registry {
  std::mutex mutex;
  std::map<std::string, BackendFactory, std::less<>> factories;
};

// Built on first use: registrations may run during static initialisation, in any order.
Registry& registry() {
  static Registry r;
  return r;
}

std::string kinds_text(const std::map<std::string, BackendFactory, std::less<>>& factories) {
  std::string text;
  for (const auto& [kind, factory] : factories) text += (text.empty() ? "" : ", ") + kind;
  return text.empty() ? "none" : text;
}

}  // namespace

void register_backend(std::string kind, BackendFactory factory) {
  if (kind.empty() || !factory)
    throw UsageError("register_backend: a backend needs a kind name and a factory");
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  if (r.factories.contains(kind))
    throw UsageError(fmt::format("a backend for device kind '{}' is registered twice", kind));
  r.factories.emplace(std::move(kind), std::move(factory));
}

std::unique_ptr<Backend> open_backend(std::string_view kind, const BackendOptions& options) {
  BackendFactory factory;
  {
    Registry& r = registry();
    std::lock_guard lock(r.mutex);
    auto it = r.factories.find(kind);
    if (it == r.factories.end())
      throw UsageError(fmt::format(
          "cannot open {}:{}: no backend for device kind '{}' is built in (known kinds: {})", kind,
          options.index, kind, kinds_text(r.factories)));
    factory = it->second;
  }
  return factory(options);  // outside the lock: the CUDA factory loads a plugin
}

std::vector<std::string> registered_backend_kinds() {
  Registry& r = registry();
  std::lock_guard lock(r.mutex);
  std::vector<std::string> kinds;
  for (const auto& [kind, factory] : r.factories) kinds.push_back(kind);
  return kinds;
}

}  // namespace pt
