// bench/tensor_parallel: the bytes its tensor-parallel groups move per training step against
// the formula (issue 34); tensor_parallel.cpp times the setups.
//
// ---- communication volume ---------------------------------------------------------------------
// Two more T = 2 runs (without and with sequence parallelism), built here as
// make_local_data_parallel builds them (R = 1, S = 1) but with two counters: a
// TensorParallelGroup decorator (what the layers ask for, by the layers' `what`) around the
// engine's CommunicatorTensorParallelGroup, and the flight recorder's communicator wrapper
// (engine/comm/recording_communicator.h: every call with its payload) around each in-process
// communicator, tensor and gradient-norm groups alike. Engine code is unchanged. Each run's
// first loss must equal its timed twin's bit for bit (the same model, the same construction);
// then --count-steps steps are counted.
//
// Bytes are PAYLOAD PER RANK, not ring traffic: an all-reduce of n floats counts 4 n bytes
// (the buffer each rank brings, and gets back summed); an all-gather counts the bytes each
// rank contributes (it receives T times that); a reduce-scatter counts its input (T times
// what it gets back). With B = batch, s = context, h = d_model, L = layers, M micro-batches
// (b = B/M sequences each), P = parameter tensors of a rank's model, per rank and step:
//   all-reduce, forward:  vocab-parallel embedding (tok_emb)         M       x b s h floats
//                         attention output projection (per block)    L M     x b s h
//                         MLP row-parallel proj (per block)          L M     x b s h
//   all-reduce, backward: attention input gradient (per block)       L M     x b s h
//                         column-parallel input gradient (per block's
//                         MLP fc, and the LM head)                   (L+1) M x b s h
//   all-gather, forward:  vocab-parallel cross-entropy: 4 softmax
//                         partials per token (max, sum exp, label
//                         logit, argmax index), once: the loss's
//                         forward also counts correct predictions   M       x 4 b s floats
//   => tensor group: (4 L + 2) B s h x 4 bytes all-reduced + 16 B s bytes gathered, in
//      (4 L + 3) M calls; independent of M and T.
// With sequence parallelism (T = 2; a chunk = b s h / T floats) each all-reduce of a block,
// and the LM head's, becomes a pair: forward all-gather of the chunk before the column layer
// (attention, MLP fc, LM head: (2 L + 1) M calls) and reduce-scatter of b s h after the row
// layer (2 L M); backward all-gather of the gradient's chunk before the row layer (2 L M) and
// reduce-scatter of the column layer's input gradient ((2 L + 1) M); the column layers keep
// only their input's chunk for backward and all-gather it again for dW ((2 L + 1) M chunks, as
// Megatron-Core: activation memory divided by T for one more all-gather); plus the first block's
// input gradient gathered (M chunks), the embedding's all-reduce (M x b s h) and the loss's
// all-gathers as above, and each layer norm's (gamma, beta) gradient all-reduced once a
// step ((2 L + 1) x 2 h floats, after the last micro-batch).
//   gradient norm (the norm group, engine/train/training_engine.cpp): 1 all-reduce of P f64
//      (one square sum per parameter tensor) = 8 P bytes.
// (Megatron-LM counts the same: 2 all-reduces forward and 2 backward per block, Shoeybi et al.
// 2019.) As ring traffic each rank would send 2 (T-1)/T of each all-reduce payload, (T-1)/T of
// each reduce-scatter input and T-1 times its all-gather contribution; the in-process
// communicator moves none of it over a wire (each rank sums its slice of shared buffers), so
// the line gives that figure derived, for comparison with the planner's ring model (which
// also assumes 16-bit values; these are f32). The same line gives the counted run's step time
// and the time rank 0 spends inside the tensor group's calls (medians over the counted steps;
// waiting for the other rank included).
//   {"bench":"tensor_parallel_bytes", "sequence_parallel", "collective", "what",
//    "calls_per_step", "calls_formula", "bytes_per_step", "bytes_formula"}  one per kind of call
//   {"bench":"tensor_parallel_bytes_total", ..., "exact"}   exact = 1 when every count matches
#include "bench/tensor_parallel_bytes.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "bench/json_line.h"
#include "bench/repeated_seconds.h"
#include "engine/comm/in_process.h"
#include "engine/comm/recording_communicator.h"
#include "engine/core/op_params.h"
#include "engine/parallel/tensor_parallel_group.h"
#include "engine/replicas/data_parallel_trainer.h"
#include "engine/trace/flight_recorder.h"
#include "kernels/cpu/cpu_backend.h"
#include "layers/tensor_parallel/shard_model.h"

namespace pt::bench {

namespace {

using Clock = std::chrono::steady_clock;

// Per token and rank, the vocab-parallel loss's partials (engine/core/op_params.h).
constexpr int64_t kSoftmaxPartialBytes = pt::kSoftmaxPartialFloats * 4;

// ---- counting ----------------------------------------------------------------------------------

// What the layers of one rank ask of their group, by collective and `what`: calls, payload
// bytes (as the header says), seconds inside the call.
struct Tally {
  int64_t calls = 0, bytes = 0;
  double seconds = 0;
};
using Tallies = std::map<std::pair<std::string, std::string>, Tally>;  // (collective, what)

class CountingGroup final : public pt::TensorParallelGroup {
 public:
  explicit CountingGroup(std::unique_ptr<pt::TensorParallelGroup> inner)
      : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce_sum(pt::Backend& backend, float* data, int64_t n,
                      std::string_view what) override {
    timed("all_reduce", what, n, [&] { inner_->all_reduce_sum(backend, data, n, what); });
  }
  void all_gather(pt::Backend& backend, const float* in, float* out, int64_t n,
                  std::string_view what) override {
    timed("all_gather", what, n, [&] { inner_->all_gather(backend, in, out, n, what); });
  }
  void reduce_scatter_sum(pt::Backend& backend, const float* in, float* out, int64_t n,
                          std::string_view what) override {
    timed("reduce_scatter", what, n * size(),
          [&] { inner_->reduce_scatter_sum(backend, in, out, n, what); });
  }

  // The tallies since the last take (and clears them).
  Tallies take() {
    std::lock_guard lock(mutex_);
    return std::exchange(tallies_, {});
  }

 private:
  template <class Call>
  void timed(const char* op, std::string_view what, int64_t floats, Call&& call) {
    const auto t0 = Clock::now();
    call();
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::lock_guard lock(mutex_);  // several devices' threads may share a group (S > 1)
    Tally& t = tallies_[{op, std::string(what)}];
    ++t.calls;
    t.bytes += floats * static_cast<int64_t>(sizeof(float));
    t.seconds += s;
  }

  std::unique_ptr<pt::TensorParallelGroup> inner_;
  std::mutex mutex_;
  Tallies tallies_;
};

// The seq the recorder's next event gets (events are numbered 0, 1, ... in begin() order).
uint64_t next_seq(const pt::FlightRecorder& recorder) {
  uint64_t next = 0;
  for (const pt::FlightEvent& e : recorder.snapshot()) next = std::max(next, e.seq + 1);
  return next;
}

// Payload bytes of the collectives of `group` a recorder saw from event `from` (seq) on.
struct CommBytes {
  int64_t all_reduce = 0, all_gather = 0, reduce_scatter = 0, other = 0, calls = 0;
  bool complete = true;  // false when the ring dropped events of the window
};

CommBytes comm_bytes(const pt::FlightRecorder& recorder, int group, uint64_t from) {
  CommBytes out;
  uint64_t seen = 0, next = from;
  for (const pt::FlightEvent& e : recorder.snapshot()) {
    if (e.seq < from) continue;
    next = std::max(next, e.seq + 1);
    ++seen;
    if (e.group != group || e.kind != pt::FlightKind::collective) continue;
    ++out.calls;
    const auto op = static_cast<pt::CommOp>(e.op);
    (op == pt::CommOp::all_reduce       ? out.all_reduce
     : op == pt::CommOp::all_gather     ? out.all_gather
     : op == pt::CommOp::reduce_scatter ? out.reduce_scatter
                                        : out.other) += e.bytes;
  }
  out.complete = seen == next - from;
  return out;
}

// ---- the counted T = 2 runs -----------------------------------------------------------------

// make_local_data_parallel's construction for R = 1, S = 1, T = 2 (engine/replicas/
// data_parallel_trainer.cpp), with the counters put in.
struct CountedRun {
  std::vector<std::unique_ptr<pt::Backend>> devices;
  std::vector<std::unique_ptr<pt::FlightRecorder>> recorders;  // one per rank
  std::vector<int> tensor_group_id, norm_group_id;             // in each rank's recorder
  std::vector<CountingGroup*> groups;                          // owned by trainer
  std::unique_ptr<pt::DataParallelTrainer> trainer;
};

std::unique_ptr<CountedRun> counted_run(const Flags& f, bool sequence_parallel) {
  constexpr int T = 2;
  auto run = std::make_unique<CountedRun>();
  const pt::PipelineConfig config = pipeline_config(f, sequence_parallel);
  pt::DataParallelTrainer::Parts parts;
  auto tensor =
      pt::make_in_process_group(T, config.timeout_s, "tensor-parallel replica 0 device 0");
  auto norm =
      pt::make_in_process_group(T, config.timeout_s, "tensor-parallel replica 0 (gradient norm)");
  for (int t = 0; t < T; ++t) {
    const auto ts = static_cast<size_t>(t);
    run->devices.push_back(pt::make_cpu_backend(t, 1));
    run->recorders.push_back(std::make_unique<pt::FlightRecorder>(4096));
    pt::FlightRecorder& rec = *run->recorders.back();
    parts.communicators.push_back(pt::record_calls(std::move(tensor[ts]), "tensor", rec));
    pt::Communicator& tensor_comm = *parts.communicators.back();
    parts.communicators.push_back(pt::record_calls(std::move(norm[ts]), "norm", rec));
    pt::Communicator& norm_comm = *parts.communicators.back();
    // The numbers record_calls got for them (a group is its name and world ranks).
    const auto members = [](const pt::Communicator& c) {
      std::vector<int> ranks;
      for (int r = 0; r < c.size(); ++r) ranks.push_back(c.world_rank(r));
      return ranks;
    };
    run->tensor_group_id.push_back(rec.group("tensor", members(tensor_comm)));
    run->norm_group_id.push_back(rec.group("norm", members(norm_comm)));

    auto routed = std::make_unique<pt::CommunicatorTensorParallelGroup>();
    routed->add_device(*run->devices.back(), tensor_comm);
    auto counting = std::make_unique<CountingGroup>(std::move(routed));
    run->groups.push_back(counting.get());
    const pt::TensorParallel tp{counting.get(), t, T, sequence_parallel};
    parts.tensor_groups.push_back(std::move(counting));

    pt::PipelineConfig rc = config;
    rc.parallel.data_parallel_groups.assign(1, nullptr);
    rc.parallel.tensor_parallel = T;
    rc.parallel.tensor_rank = t;
    rc.parallel.tensor_parallel_group = &norm_comm;
    parts.models.push_back(std::make_unique<pt::Model>(
        pt::shard_model(make_model(f), tp, t == 0 ? &parts.replicated_layers : nullptr)));
    parts.replicas.push_back(std::make_unique<pt::PipelineTrainer>(
        *parts.models.back(), std::vector<pt::Backend*>{run->devices.back().get()}, rc));
  }
  parts.whole_model = std::make_unique<pt::Model>(make_model(f));
  run->trainer = std::make_unique<pt::DataParallelTrainer>(std::move(parts));
  return run;
}

struct Term {  // one kind of call in the formula
  std::string collective, what;
  int64_t calls = 0, bytes = 0;
};

// The formula of the header, per rank and step (T = 2).
std::vector<Term> formula(const Flags& f, bool sequence_parallel) {
  constexpr int64_t T = 2;
  const int64_t M = f.microbatches, L = f.layers, b = f.batch / f.microbatches;
  const int64_t act = b * f.context * f.d_model * 4;  // one micro-batch's (b, s, h) in f32
  const int64_t chunk = act / T;                      // a rank's part of the sequence
  // Once a micro-batch: the loss's forward, which also counts the correct predictions.
  const Term loss{"all_gather", "vocab-parallel cross-entropy: softmax partials", M,
                  M * b * f.context * kSoftmaxPartialBytes};
  if (!sequence_parallel)
    return {
        {"all_reduce", "vocab-parallel embedding: rows of the table", M, M * act},
        {"all_reduce", "attention: output projection", L * M, L * M * act},
        {"all_reduce", "row-parallel linear: output", L * M, L * M * act},
        {"all_reduce", "attention: input gradient", L * M, L * M * act},
        {"all_reduce", "column-parallel linear: input gradient", (L + 1) * M, (L + 1) * M * act},
        loss,
    };
  return {
      {"all_reduce", "vocab-parallel embedding: rows of the table", M, M * act},
      {"all_gather", "attention: sequence of the input", L * M, L * M * chunk},
      {"reduce_scatter", "attention: output projection", L * M, L * M * act},
      {"all_gather", "column-parallel linear: sequence of the input", (L + 1) * M,
       (L + 1) * M * chunk},
      // The column layers keep their input's chunk and gather it again for dW.
      {"all_gather", "attention: sequence of the input, again", L * M, L * M * chunk},
      {"all_gather", "column-parallel linear: sequence of the input, again", (L + 1) * M,
       (L + 1) * M * chunk},
      {"reduce_scatter", "row-parallel linear: output", L * M, L * M * act},
      {"all_gather", "row-parallel linear: sequence of the gradient", L * M, L * M * chunk},
      {"all_gather", "attention: sequence of the gradient", L * M, L * M * chunk},
      {"reduce_scatter", "attention: input gradient", L * M, L * M * act},
      {"reduce_scatter", "column-parallel linear: input gradient", (L + 1) * M, (L + 1) * M * act},
      {"all_gather", "transformer block: input gradient", M, M * chunk},
      // Each layer norm (2 per block, ln_f) sums its (gamma, beta) gradients over the ranks'
      // chunks of the sequence once a step, after the last micro-batch's backward.
      {"all_reduce", "layernorm (sequence parallel): weight and bias gradients", 2 * L + 1,
       (2 * L + 1) * 2 * f.d_model * 4},
      loss,
  };
}

int64_t param_tensors(const pt::Model& m) {
  int64_t n = 0;
  for (int l = 0; l < m.num_layers(); ++l)
    n += static_cast<int64_t>(m.layer(l).param_specs().size());
  return n;
}

// Runs the counted steps and prints the byte lines; returns the first step's loss.
}  // namespace

double report_bytes(const Flags& f, const Batch& batch, bool sequence_parallel,
                    double timed_first_loss) {
  constexpr int T = 2;
  const int64_t sp = sequence_parallel ? 1 : 0;
  auto run = counted_run(f, sequence_parallel);
  const double first_loss = run->trainer->train_step(batch.x, batch.y).loss;
  std::vector<uint64_t> mark(T);
  for (int t = 0; t < T; ++t) {
    run->groups[static_cast<size_t>(t)]->take();
    mark[static_cast<size_t>(t)] = next_seq(*run->recorders[static_cast<size_t>(t)]);
  }
  std::vector<double> step_s, rank0_comm_s;
  std::vector<Tallies> per_rank(T);
  for (int k = 0; k < f.count_steps; ++k) {
    const auto t0 = Clock::now();
    run->trainer->train_step(batch.x, batch.y);
    step_s.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    for (int t = 0; t < T; ++t) {
      double s = 0;
      for (const auto& [key, tally] : run->groups[static_cast<size_t>(t)]->take()) {
        Tally& sum = per_rank[static_cast<size_t>(t)][key];
        sum.calls += tally.calls;
        sum.bytes += tally.bytes;
        sum.seconds += tally.seconds;
        s += tally.seconds;
      }
      if (t == 0) rank0_comm_s.push_back(s);
    }
  }
  const int64_t K = f.count_steps;
  // The layers' calls, rank 0, against the formula term by term; rank 1 must have the same.
  bool exact = per_rank[0].size() == per_rank[1].size();
  for (const auto& [key, tally] : per_rank[0]) {
    const auto other = per_rank[1].find(key);
    exact = exact && other != per_rank[1].end() && other->second.calls == tally.calls &&
            other->second.bytes == tally.bytes;
  }
  const bool ranks_agree = exact;
  // Bytes by collective: measured at the group (rank 0) and by the formula.
  std::map<std::string, int64_t> group_bytes, formula_bytes;
  int64_t group_calls = 0, formula_calls = 0;
  std::map<std::pair<std::string, std::string>, bool> in_formula;
  for (const Term& term : formula(f, sequence_parallel)) {
    in_formula[{term.collective, term.what}] = true;
    const auto it = per_rank[0].find({term.collective, term.what});
    const Tally got = it == per_rank[0].end() ? Tally{} : it->second;
    exact = exact && got.calls == term.calls * K && got.bytes == term.bytes * K;
    pt::bench::emit({{"bench", std::string("tensor_parallel_bytes")},
                     {"sequence_parallel", sp},
                     {"collective", term.collective},
                     {"what", term.what},
                     {"calls_per_step", got.calls / K},
                     {"calls_formula", term.calls},
                     {"bytes_per_step", got.bytes / K},
                     {"bytes_formula", term.bytes}});
    formula_bytes[term.collective] += term.bytes;
    formula_calls += term.calls;
  }
  for (const auto& [key, tally] : per_rank[0]) {
    group_bytes[key.first] += tally.bytes / K;
    group_calls += tally.calls / K;
    if (in_formula.count(key)) continue;
    exact = false;  // a call the formula does not have
    pt::bench::emit({{"bench", std::string("tensor_parallel_bytes")},
                     {"sequence_parallel", sp},
                     {"collective", key.first},
                     {"what", key.second},
                     {"calls_per_step", tally.calls / K},
                     {"calls_formula", int64_t{0}},
                     {"bytes_per_step", tally.bytes / K},
                     {"bytes_formula", int64_t{0}}});
  }
  // The same traffic seen at the communicators (rank 0), and the gradient norm's.
  const CommBytes tensor = comm_bytes(*run->recorders[0], run->tensor_group_id[0], mark[0]);
  const CommBytes norm = comm_bytes(*run->recorders[0], run->norm_group_id[0], mark[0]);
  const int64_t norm_formula = 8 * param_tensors(run->trainer->replica(0).model());
  int64_t group_total = 0, formula_total = 0;
  for (const auto& [op, bytes] : group_bytes) group_total += bytes;
  for (const auto& [op, bytes] : formula_bytes) formula_total += bytes;
  exact = exact && group_calls == formula_calls && group_total == formula_total &&
          tensor.complete && tensor.all_reduce / K == formula_bytes["all_reduce"] &&
          tensor.all_gather / K == formula_bytes["all_gather"] &&
          tensor.reduce_scatter / K == formula_bytes["reduce_scatter"] && tensor.other == 0 &&
          tensor.calls / K == formula_calls && norm.complete &&
          norm.all_reduce / K == norm_formula && norm.all_gather == 0 && norm.reduce_scatter == 0 &&
          norm.other == 0 && norm.calls == K;
  // Ring traffic each rank would send: all-reduce 2 (T-1)/T of its payload, reduce-scatter
  // (T-1)/T of its input, all-gather T-1 times its contribution.
  const double ring =
      2.0 * (T - 1) / T * static_cast<double>(group_bytes["all_reduce"]) +
      static_cast<double>(T - 1) / T * static_cast<double>(group_bytes["reduce_scatter"]) +
      static_cast<double>((T - 1) * group_bytes["all_gather"]);
  const Spread step = pt::bench::spread_of(step_s), comm = pt::bench::spread_of(rank0_comm_s);
  pt::bench::emit(
      {{"bench", std::string("tensor_parallel_bytes_total")},
       {"tp", int64_t{T}},
       {"sequence_parallel", sp},
       {"count", std::string("payload per rank per step (not ring traffic)")},
       {"calls_per_step", group_calls},
       {"calls_formula", formula_calls},
       {"all_reduce_bytes", group_bytes["all_reduce"]},
       {"all_reduce_bytes_formula", formula_bytes["all_reduce"]},
       {"all_gather_bytes", group_bytes["all_gather"]},
       {"all_gather_bytes_formula", formula_bytes["all_gather"]},
       {"reduce_scatter_bytes", group_bytes["reduce_scatter"]},
       {"reduce_scatter_bytes_formula", formula_bytes["reduce_scatter"]},
       {"tensor_group_bytes", group_total},
       {"tensor_group_bytes_formula", formula_total},
       {"communicator_bytes",
        (tensor.all_reduce + tensor.all_gather + tensor.reduce_scatter + tensor.other) / K},
       {"grad_norm_bytes", norm.all_reduce / K},
       {"grad_norm_bytes_formula", norm_formula},
       {"ring_bytes_sent_per_rank", ring},
       {"ranks_agree", int64_t{ranks_agree}},
       {"exact", int64_t{exact}},
       {"counted_steps", K},
       {"step_ms", step.median * 1e3},
       {"tensor_group_ms", comm.median * 1e3},
       {"tensor_group_ms_min", comm.min * 1e3},
       {"tensor_group_ms_max", comm.max * 1e3},
       {"same_first_loss_as_timed_run", int64_t{first_loss == timed_first_loss}}});
  return first_loss;
}

}  // namespace pt::bench
