#pragma once
// Sampling text from a trained byte-level language model (gpt() in layers/zoo.h).
//
// Training leaves the parameters spread over the stages of a pipeline, possibly on several
// devices or processes. Sampling runs on one device: the trained values are copied by name
// (the checkpoint names of model.h, so any partition works) into a StageParameters holding the
// whole model, like loading a checkpoint held in memory; then tokens are drawn one at a time:
//
//   window = the last min(n, T) tokens          (T = the model's context)
//   logits = model(window)[last position] / temperature
//   keep the top_k largest logits, softmax, draw with u = counter_uniform(seed, n)
//
// temperature 0 (or top_k 1) is greedy: the arg-max, the lowest id on ties. Everything is a pure
// function of (parameters, prompt, options): the same seed gives the same text.
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "engine/checkpoint/checkpoint.h"
#include "engine/comm/communicator.h"
#include "engine/core/backend.h"
#include "engine/train/stage_parameters.h"
#include "layers/model.h"

namespace pt {

struct SamplingOptions {
  int64_t max_new_tokens = 200;
  float temperature = 1.f;  // > 0 scales the logits; 0: greedy
  int64_t top_k = 0;        // 0: all tokens; k: only the k most likely
  uint64_t seed = 0;

  // Throws UsageError for temperature < 0 (or not finite), top_k < 0, max_new_tokens < 0.
  void validate() const;
};

// Fills `into` (its layers [first, last) of the same model) with the trained values of the
// same names from `trained` (e.g. TrainingEngine::stage_states()). Values may be on any devices.
// Under MPI each process holds only its own stages: pass the world communicator (every process
// must call this) and the values are combined over it, each parameter from the lowest rank that
// holds it. Throws UsageError naming a parameter that no stage holds.
void copy_trained_parameters(std::span<const StageState> trained, StageParameters& into,
                             Communicator* world = nullptr);

// The next max_new_tokens token ids after `prompt` (ids in [0, vocab)), sampled from `model`,
// whose layers must be bound to parameters on `device` (e.g. a StageParameters of the whole
// model). The model must take int32 ids (T) and output logits (T, vocab); it must accept
// shorter sequences (gpt() does). A prompt longer than T is cropped to its last T tokens.
// Throws UsageError for an empty prompt, an id outside [0, vocab), or bad options.
std::vector<int32_t> sample_tokens(const Model& model, Backend& device,
                                   std::span<const int32_t> prompt, const SamplingOptions& options);

// Byte-level text: copies `trained` into a fresh single-device instance `model` (built like
// the trained one, not bound to anything: e.g. a second call of the same builder) on `device`,
// samples max_new_tokens bytes after `prompt` and returns them (without the prompt). `world`:
// as in copy_trained_parameters (nullptr outside MPI).
std::string generate(Model& model, std::span<const StageState> trained, Backend& device,
                     std::string_view prompt, const SamplingOptions& options,
                     Communicator* world = nullptr);

}  // namespace pt
