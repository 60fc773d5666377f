#pragma once
// The layer-cost file: a model known only by what each layer costs, for pipetrain-plan (the
// planner without the model). Plain text, '#' comments, one table per micro-batch size:
//
//   samples 4     # the lines below are the costs of one micro-batch of 4 samples
//   # forward_s  backward_input_s  backward_weight_s  activation_bytes  output_bytes  param_bytes
//   1.2e-4       1.1e-4            0.9e-4             802816            802816        1606144
//   ...           (one line per layer, in model order; every table has the same layers)
//
// Seconds per micro-batch for F, I and W; bytes per micro-batch of what forward saves for
// backward and of the output that crosses a stage boundary; f32 parameter bytes (gradients and
// optimizer state scale with them). `--plan auto --write-costs` writes one table for each
// micro-batch size the planner asked for, so pipetrain-plan with the same batch plans with the
// very same numbers; a size without a table is scaled linearly from the nearest one below it (or
// the smallest): times and activation and output bytes by the ratio of sizes, parameters not.
//
// Optional, once, anywhere: `epilogue SERIAL UPDATE`, the step's epilogue in seconds per
// parameter (step_overheads.h: the gradient norm over a replica's parameters; the optimizer
// update over the fullest device's). --plan auto --costs profile writes the ones it measured;
// without the line the epilogue costs nothing.
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "engine/partition/layer_costs.h"
#include "engine/partition/step_overheads.h"

namespace pt {

struct CostTables {
  std::map<int64_t, std::vector<LayerProfile>> by_samples;  // micro-batch size -> per layer
  StepOverheads epilogue;                                   // the `epilogue` line, or zeros

  // The table for `samples`, or one scaled linearly as above. Needs a table; samples >= 1.
  std::vector<LayerProfile> for_samples(int64_t samples) const;
  int layers() const;
};

// Throws FileError "NAME:LINE: ..." with what was expected: a line before any `samples N`, a
// size twice, a second `epilogue` line or one without two seconds, a layer line without exactly six
// numbers or with one out of range (seconds 0..1e6, bytes 0..2^50, whole), tables of different
// layer counts, or no table at all.
CostTables parse_cost_text(std::string_view text, const std::string& name);
CostTables read_cost_file(const std::string& path);

// The file text (parse_cost_text reads it back to the same numbers: shortest round-trip
// decimals), after `comment` as '#' lines.
std::string cost_file_text(const CostTables& tables, std::string_view comment);

}  // namespace pt
