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
  const SizeTable& layout() const { return table_; }
  // Entry i's parameter and gradient (after split_into_units: only while its unit's are
  // resident; a logic_error otherwise).
  Tensor param(size_t i) const;
  Tensor grad(size_t i) const;
  // The arenas as flat tensors (after split_into_units there are none: a logic_error).
  Tensor params_flat() const;
  Tensor grads_flat() const;
  int64_t param_count() const;

  // ---- full sharding (--shard full, engine/parallel/full_shard/) ----------------------------
  // The arenas cut into units of whole layers, each its own allocation that exists only while
  // the unit is resident: unit u holds layers [first_layers[u], first_layers[u + 1]) (the last
  // up to the stage's end) and the byte window [offset, offset + bytes) of layout(), so a unit's
  // flat view and the same window of an unsplit arena hold the same values at the same places.
  struct UnitWindow {
    int first_layer = 0, last_layer = 0;
    size_t first_entry = 0, end_entry = 0;
    size_t offset = 0, bytes = 0;  // in layout(); bytes 0: a unit without parameters
  };
  // Keeps the values: every unit starts resident (parameters and gradients). first_layers[0]
  // must be the stage's first layer.
  void split_into_units(const std::vector<int>& first_layers);
  bool split() const { return !units_.empty(); }
  size_t num_units() const { return units_.size(); }
  const UnitWindow& unit(size_t u) const { return units_.at(u).window; }
  size_t unit_of_layer(int layer) const;
  bool unit_params_resident(size_t u) const;
  bool unit_grads_resident(size_t u) const;
  Tensor unit_params_flat(size_t u) const;
  Tensor unit_grads_flat(size_t u) const;
  // Allocates the unit's parameters (values unspecified: the caller fills them) or gradients
  // (zeros) and binds its layers to them; release_* drops them (the layers are bound to
  // placeholders without memory in their place).
  void materialize_unit_params(size_t u);
  void release_unit_params(size_t u);
  void materialize_unit_grads(size_t u);
  void release_unit_grads(size_t u);

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

  struct Unit {
    UnitWindow window;
    SizeTable table;  // the window's entries, offsets from the window's start
    Arena params, grads;
    bool params_resident = true, grads_resident = true;
  };
  void bind_unit(size_t u);
  SizeTable table_;
  std::vector<Unit> units_;         // empty: not split
  std::vector<size_t> entry_unit_;  // per entry, after split_into_units
};

// Fills `out` (host memory, `n` floats) with the initial values of parameter `param_index` of
// global layer `layer_index`, following `init` (a pure function of its arguments).
void initial_values(const ParamInit& init, uint64_t seed, int layer_index, size_t param_index,
                    float* out, int64_t n);

}  // namespace pt
