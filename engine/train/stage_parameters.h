#pragma once
// The parameters of one stage: the layers [first, last) of a Model instantiated on one device.
// Parameters and gradients live in two arenas with the same layout (one allocation each), so
// zeroing gradients, clipping, the optimizer update and (later) the gradient all-reduce each
// run over one flat buffer. Values are initialised from (seed, global layer index, parameter
// index): the same model comes out however it is partitioned.
#include <string>
#include <vector>

#include "engine/core/arena.h"
#include "layers/model.h"

namespace pt {

struct ParameterEntry {
  int layer = 0;           // global layer index
  std::string name;        // "{layer}.{layer_name}.{param}" (checkpoint name)
  size_t table_index = 0;  // entry in the arenas' size table
  size_t param_index = 0;  // index in the layer's param_specs()
  bool tied_copy = false;  // a tied parameter's copy other than the owner's (Model::ties)
};

class StageParameters {
 public:
  StageParameters(const Model& model, int first_layer, int last_layer, Backend& backend,
                  uint64_t seed);
  // Unbinds the stage's layers that are still bound to these parameters.
  ~StageParameters();
  StageParameters(const StageParameters&) = delete;
  StageParameters& operator=(const StageParameters&) = delete;

  int first_layer() const { return first_; }
  int last_layer() const { return last_; }  // exclusive
  Backend& backend() const { return *backend_; }

  const std::vector<ParameterEntry>& entries() const { return entries_; }
  const SizeTable& layout() const { return params_.table(); }
  Tensor param(size_t i) const { return params_.view(entries_[i].table_index); }
  Tensor grad(size_t i) const { return grads_.view(entries_[i].table_index); }
  Tensor params_flat() const { return params_.flat(); }
  Tensor grads_flat() const { return grads_.flat(); }
  int64_t param_count() const;

  void zero_grads();
  // A new accumulation of gradients that writes nothing now: each layer's first weight gradient
  // after it writes the layer's gradients instead of adding to them (take_unwritten(layer) says
  // whether this is that first one, and counts it), and finish_gradients() zeroes those of any
  // layer that had none, before anything reads them. zero_grads() is the eager form (a pass over
  // every gradient, which the layers' first writes make unnecessary).
  void start_gradients();
  bool take_unwritten(int layer);
  void finish_gradients();

  // --update async: a second copy of the parameters in an arena of the same layout, the older
  // weight version (engine/update/weight_versions.h); checkpoints save it as "stash.*".
  // add_stash() allocates it as a copy of the parameters.
  void add_stash();
  bool has_stash() const { return has_stash_; }
  Tensor stash(size_t i) const { return stash_.view(entries_[i].table_index); }
  Tensor stash_flat() const { return stash_.flat(); }
  size_t stash_bytes() const { return has_stash_ ? stash_.bytes() : 0; }
  // The stash becomes the parameters and the parameters the stash (two handles trade places, no
  // byte moves): an update written into the stash makes it the latest version, and the version
  // it replaces becomes the previous one. Views taken before point at the same bytes, which now
  // play the other role.
  void swap_stash();

 private:
  const Model* model_;
  int first_, last_;
  Backend* backend_;
  std::vector<ParameterEntry> entries_;
  Arena params_;
  Arena grads_;
  Arena stash_;
  bool has_stash_ = false;
  std::vector<bool> unwritten_;  // per layer of the stage: no gradient written since the start
};

// Fills `out` (host memory, `n` floats) with the initial values of parameter `param_index` of
// global layer `layer_index`, following `init` (a pure function of its arguments).
void initial_values(const ParamInit& init, uint64_t seed, int layer_index, size_t param_index,
                    float* out, int64_t n);

}  // namespace pt
