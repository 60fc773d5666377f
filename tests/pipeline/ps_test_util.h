#pragma once
// What the parameter-server tests share (parameter_server_test.cpp, ps_stages_test.cpp): the
// small model and its data, bit-for-bit comparisons that treat NaN as failure, the optimizer
// state by name, and a checkpoint of a running engine.
#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "../engine/synthetic.h"
#include "engine/checkpoint/checkpoint.h"
#include "engine/setup/training_run.h"
#include "layers/zoo.h"

namespace pt::test {

inline Model ps_small_mlp() { return deep_mlp(3, 48, Shape{1, 6, 6}); }

// SGD with momentum or AdamW, weight decay, a cosine (or constant) schedule and clipping that is
// active (the global norm, exchanged between servers, matters).
inline TrainerConfig ps_trainer_config(const std::string& optim, bool cosine = true,
                                       float clip = 0.5f) {
  TrainerConfig c;
  c.seed = 5;
  c.optimizer.kind = optim;
  c.optimizer.lr = optim == "sgd" ? 0.05f : 0.003f;
  c.optimizer.momentum = optim == "sgd" ? 0.9f : 0.f;
  c.optimizer.weight_decay = 0.01f;
  c.lr = {cosine ? LrSchedule::Kind::cosine : LrSchedule::Kind::constant, c.optimizer.lr, 2, 20,
          0.f};
  c.clip_norm = clip;
  return c;
}

struct PsData {
  Dataset set;
  Tensor x, y;
  explicit PsData(int64_t batch) : set(synthetic_dataset(batch, Shape{1, 6, 6}, 10, 4)) {
    x = Tensor::borrow(set.inputs.data(), Shape{1, 6, 6}.with_batch(batch));
    y = Tensor::borrow(set.labels.data(), Shape{batch}, DType::i32);
  }
};

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (float v : a)
    if (!std::isfinite(v)) return false;
  return std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

using NamedFloats = std::map<std::string, std::vector<float>>;

inline bool same(const NamedFloats& a, const NamedFloats& b) {
  if (a.size() != b.size() || a.empty()) return false;
  for (const auto& [name, v] : a) {
    auto it = b.find(name);
    if (it == b.end() || !same_bits(v, it->second)) return false;
  }
  return true;
}

// Every optimizer slot of every tensor, by "<tensor name>.<slot name>".
inline NamedFloats optimizer_state(const std::vector<StageState>& stages) {
  NamedFloats out;
  for (const StageState& s : stages)
    for (const OptimizerSlot& slot : s.optimizer->slots())
      for (size_t i = 0; i < s.params->entries().size(); ++i) {
        const Tensor t = slot.state.view(i);
        out[s.params->entries()[i].name + "." + slot.name].assign(t.f32(), t.f32() + t.numel());
      }
  return out;
}

// A checkpoint of the run at its current step (collective: stages_to_save fetches the servers').
inline void save_now(TrainingRun& run, const std::string& path) {
  TrainingState st;
  st.step = run.engine->step();
  st.seed = run.engine->seed();
  st.layout = run.layout;
  save_checkpoint(path, run.engine->model(), run.engine->stages_to_save(), st);
}

}  // namespace pt::test
