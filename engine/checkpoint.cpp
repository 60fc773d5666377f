#include "engine/checkpoint.h"

#include <charconv>
#include <limits>
#include <sstream>

#include <fmt/format.h>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"

namespace pt {

namespace {

constexpr const char* kFormat = "pipetrain-checkpoint-1";

std::string optimizer_name(const std::string& param, const std::string& slot) {
  return fmt::format("optimizer.{}.{}", param, slot);
}

// A metadata value as an integer of type T: int64_t for steps and positions, uint64_t for the seed
// (any 64-bit seed the programs accept, 2^64 - 1 included).
template <typename T = int64_t>
T parse_int(const SafetensorsFile& f, const std::string& key, const std::filesystem::path& path) {
  auto it = f.metadata.find(key);
  if (it == f.metadata.end())
    throw FileError(
        fmt::format("checkpoint {} has no '{}' in its metadata: it is not a complete "
                    "pipetrain checkpoint",
                    path.string(), key));
  T v = 0;
  auto [p, ec] = std::from_chars(it->second.data(), it->second.data() + it->second.size(), v);
  if (ec != std::errc() || p != it->second.data() + it->second.size())
    throw FileError(fmt::format("checkpoint {}: metadata '{}' = '{}' is not an integer in [{}, {}]",
                                path.string(), key, it->second, std::numeric_limits<T>::min(),
                                std::numeric_limits<T>::max()));
  return v;
}

// The first line where two model signatures differ, for the error message.
std::string first_difference(const std::string& theirs, const std::string& ours) {
  std::istringstream a(theirs), b(ours);
  std::string la, lb;
  while (true) {
    const bool ga = static_cast<bool>(std::getline(a, la));
    const bool gb = static_cast<bool>(std::getline(b, lb));
    if (!ga && !gb) return "(no difference)";
    if (!ga) la = "(nothing)";
    if (!gb) lb = "(nothing)";
    if (la != lb || !ga || !gb)
      return fmt::format("checkpoint has '{}', this model has '{}'", la, lb);
  }
}

void check_matches(const HostTensor& h, const Tensor& t, const std::filesystem::path& path) {
  if (h.dtype != t.dtype() || h.shape != t.shape())
    throw FileError(fmt::format("checkpoint {}: tensor '{}' is {} {} but this model needs {} {}",
                                path.string(), h.name, dtype_name(h.dtype), h.shape.str(),
                                dtype_name(t.dtype()), t.shape().str()));
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const Model& model,
                     std::span<const StageState> stages, const TrainingState& state) {
  SafetensorsFile file;
  auto add = [&](const std::string& name, const Tensor& t, Backend& backend) {
    HostTensor h;
    h.name = name;
    h.dtype = t.dtype();
    h.shape = t.shape();
    h.data.resize(t.bytes());
    if (t.bytes()) backend.copy_to_host(h.data.data(), t.data(), t.bytes());
    file.tensors.push_back(std::move(h));
  };
  for (const StageState& s : stages)
    for (size_t i = 0; i < s.params->entries().size(); ++i)
      add(s.params->entries()[i].name, s.params->param(i), s.params->backend());
  const Optimizer* any_optimizer = nullptr;
  for (const StageState& s : stages) {
    if (!s.optimizer) continue;
    any_optimizer = s.optimizer;
    for (const OptimizerSlot& slot : s.optimizer->slots())
      for (size_t i = 0; i < s.params->entries().size(); ++i)
        add(optimizer_name(s.params->entries()[i].name, slot.name),
            slot.state.view(s.params->entries()[i].table_index), s.params->backend());
  }
  file.metadata = state.extra;
  file.metadata["format"] = kFormat;
  file.metadata["model_signature"] = model.signature();
  file.metadata["step"] = std::to_string(state.step);
  file.metadata["epoch"] = std::to_string(state.epoch);
  file.metadata["batch_in_epoch"] = std::to_string(state.batch_in_epoch);
  file.metadata["seed"] = std::to_string(state.seed);
  if (any_optimizer) {
    file.metadata["optimizer"] = any_optimizer->config().kind;
    file.metadata["optimizer_config"] = any_optimizer->config().str();
    file.metadata["optimizer_steps"] = std::to_string(any_optimizer->steps_taken());
  }
  save_safetensors(path, file);
}

TrainingState load_checkpoint(const std::filesystem::path& path, const Model& model,
                              std::span<const StageState> stages) {
  const SafetensorsFile file = load_safetensors(path);
  auto meta = [&](const std::string& key) -> std::string {
    auto it = file.metadata.find(key);
    return it == file.metadata.end() ? std::string() : it->second;
  };
  if (meta("format") != kFormat)
    throw FileError(
        fmt::format("{} is not a pipetrain checkpoint (metadata format is '{}', expected "
                    "'{}')",
                    path.string(), meta("format"), kFormat));
  if (meta("model_signature") != model.signature())
    throw FileError(
        fmt::format("checkpoint {} was written for a different model: {}. Build the same "
                    "model (flags --model etc.) as the run that saved it",
                    path.string(), first_difference(meta("model_signature"), model.signature())));

  auto load = [&](const std::string& name, const Tensor& t, Backend& backend) {
    const HostTensor* h = file.find(name);
    if (!h) throw FileError(fmt::format("checkpoint {} has no tensor '{}'", path.string(), name));
    check_matches(*h, t, path);
    if (t.bytes()) backend.copy_from_host(t.data(), h->data.data(), t.bytes());
  };
  for (const StageState& s : stages) {
    const StageParameters& params = *s.params;
    for (size_t i = 0; i < params.entries().size(); ++i)
      load(params.entries()[i].name, params.param(i), params.backend());
  }
  for (const StageState& s : stages) {
    if (!s.optimizer) continue;
    Optimizer& opt = *s.optimizer;
    if (meta("optimizer").empty())
      throw FileError(
          fmt::format("checkpoint {} holds weights only (no optimizer state; e.g. written "
                      "by --save-init): it cannot be resumed from",
                      path.string()));
    if (meta("optimizer") != opt.config().kind)
      throw FileError(
          fmt::format("checkpoint {} was trained with optimizer '{}' but this run uses "
                      "'{}': pass --optim {}",
                      path.string(), meta("optimizer"), opt.config().kind, meta("optimizer")));
    for (OptimizerSlot& slot : opt.slots())
      for (size_t i = 0; i < s.params->entries().size(); ++i)
        load(optimizer_name(s.params->entries()[i].name, slot.name),
             slot.state.view(s.params->entries()[i].table_index), s.params->backend());
    opt.set_steps_taken(parse_int(file, "optimizer_steps", path));
  }
  TrainingState state;
  state.step = parse_int(file, "step", path);
  state.epoch = parse_int(file, "epoch", path);
  state.batch_in_epoch = parse_int(file, "batch_in_epoch", path);
  state.seed = parse_int<uint64_t>(file, "seed", path);
  for (const auto& [k, v] : file.metadata) state.extra[k] = v;
  return state;
}

}  // namespace pt
