// bench/gpu: what one GPU does with pipetrain, as JSON lines (skips with exit code 77 and a reason
// when CUDA is unavailable):
//   {"bench":"gpu_gemm", "precision", "n", "tflops", "peak_tflops", "ratio_to_peak"}
//       square GEMMs through the backend (cuBLASLt), fp32 / tf32 / bf16 operands; the peak is the
//       datasheet's dense figure for the GPU when we know it (H100/H200 SXM), else null
//   {"bench":"gpu_copy", "kind", "mib", "gb_per_s"}
//       same-device copy_within, slot-to-slot copy_to_peer (two backends on one GPU, the path two
//       stages sharing a GPU take), cuda:0 -> cuda:1 peer copy when there are two GPUs,
//       host->device and device->host (pageable host memory, as the engine's inputs are)
//   {"bench":"gpu_train", "model", "precision", "batch", "step_ms", "samples_per_s" |
//   "tokens_per_s",
//    "model_tflops", "mfu"}
//       an MLP (784-2048x8-10, batch 4096) and a GPT (d 768, 12 layers, context 512) training on
//       cuda:0, AdamW; model FLOPs as bench/gpt counts them (6 N per sample/token, plus 12 L d T
//       for attention)
//   {"bench":"gpu_attention", "kernel", "B", "T", "H", "Dh", "fwd_ms", "fwd_bwd_ms" (+ _min, _max),
//    "tflops" (+ _min, _max), "reps"}
//       causal attention alone at GPT-2 124M's shape (B 16, T 1024, 12 heads of 64): the native
//       kernel (fp32) and cuDNN's fused flash attention (bf16, fast and deterministic backward),
//       fp32 <-> bf16 conversions included as the engine pays them; FLOPs are the causal ones
//       (7 products of 2 Dh FLOPs per (query, key <= query) pair, FlashAttention's count)
//   {"bench":"gpu_gpt2", "stages", "microbatches", "schedule", "step_ms" (+ _min, _max),
//    "tokens_per_s" (+ _min, _max), "mfu", "peak_mib", "ratio_to_one_stage", "reps"}
//       the GPT-2 124M shape of issue 36 and llm.c (vocab 50257 padded to 50304, T 1024, d 768,
//       12 layers, 12 heads, batch 16, bf16, AdamW, random tokens): one stage, then two stages
//       on slots of cuda:0 (1F1B, M = 8); MFU with llm.c's formula (6 N + 6 L d T FLOPs per
//       token, N all parameters, the tied embedding once) over the bf16 datasheet peak (989.4;
//       llm.c's mfu.h gives 988.9 for the H100 SXM); peak_mib: the largest device's peak allocation
//       in the timed steps
//   {"bench":"gpu_pipeline", "schedule", "stages", "microbatches", "step_ms", "single_ms",
//    "predicted_ms", "predicted_over_measured"}
//       the GPT pipelined over two backends (slots of cuda:0, or two GPUs); the prediction is the
//       simulator fed with the single-device step time split evenly over stages and micro-batches
//       (F : B = 1 : 2). On one GPU the slots share its SMs, which the simulator does not model:
//       the ratio says how far from independent devices that is.
// Every timed step ends with synchronize() on every backend, so GPU time is what is measured.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "bench/best_seconds.h"
#include "bench/json_line.h"
#include "bench/repeated_seconds.h"
#include "engine/core/random.h"
#include "engine/devices/cuda_plugin.h"
#include "engine/pipeline/pipeline_trainer.h"
#include "engine/train/trainer.h"
#include "layers/zoo.h"
#include "schedule/generators.h"
#include "schedule/lowering.h"
#include "schedule/simulate.h"

namespace {

using pt::CudaPrecision;
using pt::bench::best_seconds;

using pt::bench::emit;
using pt::bench::Fields;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();  // written as null

// Dense datasheet peaks (TFLOP/s) of the GPUs we know; nullopt otherwise.
std::optional<double> peak_tflops(const std::string& gpu, CudaPrecision p) {
  const bool hopper_sxm =
      gpu.find("H200") != std::string::npos || gpu.find("H100 80GB HBM3") != std::string::npos;
  if (!hopper_sxm) return std::nullopt;
  switch (p) {
    case CudaPrecision::fp32: return 67.0;
    case CudaPrecision::tf32: return 494.7;
    case CudaPrecision::bf16: return 989.4;
  }
  return std::nullopt;
}

double or_null(std::optional<double> v) { return v ? *v : kNaN; }

void bench_gemm(const std::string& gpu, int reps) {
  for (CudaPrecision p : {CudaPrecision::fp32, CudaPrecision::tf32, CudaPrecision::bf16}) {
    auto b = pt::make_cuda_backend(0, 0, p);
    for (int64_t n : {2048, 8192}) {
      pt::Tensor A = b->empty({n, n}), B = b->empty({n, n}), C = b->zeros({n, n});
      b->fill(A.f32(), 0.5f, n * n);
      b->fill(B.f32(), 0.25f, n * n);
      const double s = best_seconds(2, reps, [&] {
        b->gemm(false, false, n, n, n, 1.f, A.f32(), n, B.f32(), n, 0.f, C.f32(), n);
        b->synchronize();
      });
      const double tflops = 2.0 * static_cast<double>(n * n * n) / s / 1e12;
      const auto peak = peak_tflops(gpu, p);
      emit({{"bench", std::string("gpu_gemm")},
            {"precision", std::string(pt::precision_name(p))},
            {"n", n},
            {"tflops", tflops},
            {"peak_tflops", or_null(peak)},
            {"ratio_to_peak",
             or_null(peak ? std::optional<double>(tflops / *peak) : std::nullopt)}});
    }
  }
}

void bench_copies(int reps) {
  constexpr int64_t kMiB = 256;
  const size_t bytes = size_t{kMiB} << 20;
  auto a = pt::make_cuda_backend(0, 0, CudaPrecision::fp32);
  auto slot = pt::make_cuda_backend(0, 1, CudaPrecision::fp32);
  pt::Tensor src = a->zeros({static_cast<int64_t>(bytes / 4)}),
             dst = a->empty({static_cast<int64_t>(bytes / 4)});
  pt::Tensor far = slot->empty({static_cast<int64_t>(bytes / 4)});
  const auto report = [&](const char* kind, double s, double factor) {
    emit({{"bench", std::string("gpu_copy")},
          {"kind", std::string(kind)},
          {"mib", int64_t{kMiB}},
          {"gb_per_s", factor * static_cast<double>(bytes) / s / 1e9}});
  };
  // A device-to-device copy reads and writes every byte: 2x the bytes cross memory.
  report("same_device_read_plus_write",
         best_seconds(1, reps,
                      [&] {
                        a->copy_within(dst.data(), src.data(), bytes);
                        a->synchronize();
                      }),
         2.0);
  report("slot_to_slot",
         best_seconds(1, reps,
                      [&] {
                        a->copy_to(*slot, far.data(), src.data(),
                                   bytes);  // the peer copy (slot to slot)
                        a->synchronize();
                        slot->synchronize();
                      }),
         1.0);
  if (pt::cuda_status().devices.size() >= 2) {
    auto other = pt::make_cuda_backend(1, 0, CudaPrecision::fp32);
    pt::Tensor remote = other->empty({static_cast<int64_t>(bytes / 4)});
    report("peer_cuda0_to_cuda1",
           best_seconds(1, reps,
                        [&] {
                          a->copy_to(*other, remote.data(), src.data(),
                                     bytes);  // through the host without peer access
                          a->synchronize();
                          other->synchronize();
                        }),
           1.0);
  }
  std::vector<float> host(bytes / 4, 1.f);
  report("host_to_device",
         best_seconds(1, reps, [&] { a->copy_from_host(dst.data(), host.data(), bytes); }), 1.0);
  report("device_to_host",
         best_seconds(1, reps, [&] { a->copy_to_host(host.data(), src.data(), bytes); }), 1.0);
}

void bench_attention(int reps) {
  const int64_t B = 16, T = 1024, H = 12, Dh = 64, n_out = B * T * H * Dh;
  const float scale = 0.125f;
  std::vector<float> host(static_cast<size_t>(3 * n_out));
  pt::CounterRng rng(3);
  for (float& x : host) x = static_cast<float>(2.0 * rng.next_double() - 1.0);
  const double pairs = static_cast<double>(B * H) * static_cast<double>(T * (T + 1) / 2);
  const double flops = 7.0 * 2.0 * static_cast<double>(Dh) * pairs;
  struct Kernel {
    const char* name;
    CudaPrecision precision;
    pt::AttentionKernel kernel;
  };
  for (const Kernel& k : {Kernel{"native_fp32", CudaPrecision::fp32, pt::AttentionKernel::native},
                          Kernel{"cudnn_bf16", CudaPrecision::bf16, pt::AttentionKernel::cudnn},
                          Kernel{"cudnn_deterministic_bf16", CudaPrecision::bf16,
                                 pt::AttentionKernel::cudnn_deterministic}}) {
    try {
      pt::BackendOptions o;
      o.precision = k.precision;
      o.attention = k.kernel;
      auto b = pt::make_cuda_backend(o);
      pt::Tensor qkv = b->empty({3 * n_out}), dout = b->empty({n_out}), out = b->empty({n_out});
      pt::Tensor lse = b->empty({B * H * T}), dqkv = b->empty({3 * n_out});
      b->copy_from_host(qkv.data(), host.data(), host.size() * sizeof(float));
      b->copy_from_host(dout.data(), host.data(), static_cast<size_t>(n_out) * sizeof(float));
      auto forward = [&] {
        b->attention_forward(qkv.f32(), out.f32(), lse.f32(), B, T, H, Dh, scale);
      };
      const auto fwd = pt::bench::spread_of(pt::bench::repeated_seconds(2, reps, [&] {
        forward();
        b->synchronize();
      }));
      const auto both = pt::bench::spread_of(pt::bench::repeated_seconds(2, reps, [&] {
        forward();
        b->attention_backward(qkv.f32(), out.f32(), dout.f32(), lse.f32(), dqkv.f32(), B, T, H, Dh,
                              scale);
        b->synchronize();
      }));
      const auto tflops = pt::bench::rate_of(both, flops / 1e12);
      emit({{"bench", std::string("gpu_attention")},
            {"kernel", std::string(k.name)},
            {"B", B},
            {"T", T},
            {"H", H},
            {"Dh", Dh},
            {"fwd_ms", fwd.median * 1e3},
            {"fwd_ms_min", fwd.min * 1e3},
            {"fwd_ms_max", fwd.max * 1e3},
            {"fwd_bwd_ms", both.median * 1e3},
            {"fwd_bwd_ms_min", both.min * 1e3},
            {"fwd_bwd_ms_max", both.max * 1e3},
            {"tflops", tflops.median},
            {"tflops_min", tflops.min},
            {"tflops_max", tflops.max},
            {"reps", int64_t{both.reps}}});
    } catch (const std::exception& e) {  // cuDNN refused: say so in the JSON, go on
      emit({{"bench", std::string("gpu_attention")},
            {"kernel", std::string(k.name)},
            {"error", std::string(e.what())}});
    }
  }
}

pt::TrainerConfig adamw(int M) {
  pt::TrainerConfig c;
  c.microbatches = M;
  c.optimizer.kind = "adamw";
  c.optimizer.lr = 3e-4f;
  c.lr = {pt::LrSchedule::Kind::constant, 3e-4f, 0, 0, 0.f};
  return c;
}

struct Tokens {
  std::vector<int32_t> x, y;
  pt::Tensor hx, hy;
  Tokens(int64_t B, int64_t T, int64_t vocab) : x(static_cast<size_t>(B * T)), y(x.size()) {
    pt::CounterRng rng(1);
    for (size_t i = 0; i < x.size(); ++i) {
      x[i] = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(vocab)));
      y[i] = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(vocab)));
    }
    hx = pt::Tensor::borrow(x.data(), {B, T}, pt::DType::i32);
    hy = pt::Tensor::borrow(y.data(), {B, T}, pt::DType::i32);
  }
};

constexpr int64_t kVocab = 256, kContext = 512, kDModel = 768, kBatch = 16;
constexpr int kLayers = 12, kHeads = 12;

pt::Model gpt_model() { return pt::gpt(kVocab, kContext, kDModel, kLayers, kHeads); }

double gpt_flops_per_token(const pt::Model& m) {
  const double n = static_cast<double>(m.param_count() - kVocab * kDModel - kContext * kDModel);
  return 6.0 * n + 12.0 * kLayers * kDModel * kContext;
}

double bench_train(const std::string& gpu, int reps) {
  double gpt_single_s = 0;
  for (CudaPrecision p : {CudaPrecision::fp32, CudaPrecision::tf32, CudaPrecision::bf16}) {
    auto b = pt::make_cuda_backend(0, 0, p);
    const auto peak = peak_tflops(gpu, p);
    {  // the deep MLP on Fashion-MNIST-shaped inputs
      const int64_t B = 4096;
      std::vector<float> x(static_cast<size_t>(B * 784), 0.5f);
      std::vector<int32_t> y(static_cast<size_t>(B), 3);
      const pt::Tensor hx = pt::Tensor::borrow(x.data(), {B, 1, 28, 28});
      const pt::Tensor hy = pt::Tensor::borrow(y.data(), {B}, pt::DType::i32);
      pt::Model m = pt::deep_mlp(8, 2048);
      pt::Trainer t(m, *b, adamw(1));
      const double s = best_seconds(2, reps, [&] {
        t.train_step(hx, hy);
        b->synchronize();
      });
      const double tflops =
          6.0 * static_cast<double>(m.param_count()) * static_cast<double>(B) / s / 1e12;
      emit({{"bench", std::string("gpu_train")},
            {"model", std::string("deep_mlp")},
            {"precision", std::string(pt::precision_name(p))},
            {"batch", B},
            {"step_ms", s * 1e3},
            {"samples_per_s", static_cast<double>(B) / s},
            {"model_tflops", tflops},
            {"mfu", or_null(peak ? std::optional<double>(tflops / *peak) : std::nullopt)}});
    }
    {  // GPT
      const Tokens data(kBatch, kContext, kVocab);
      pt::Model m = gpt_model();
      pt::Trainer t(m, *b, adamw(1));
      const double s = best_seconds(1, reps, [&] {
        t.train_step(data.hx, data.hy);
        b->synchronize();
      });
      if (p == CudaPrecision::fp32) gpt_single_s = s;
      const double tokens = static_cast<double>(kBatch * kContext) / s;
      const double tflops = tokens * gpt_flops_per_token(m) / 1e12;
      emit({{"bench", std::string("gpu_train")},
            {"model", std::string("gpt_d768_l12_t512")},
            {"precision", std::string(pt::precision_name(p))},
            {"batch", kBatch},
            {"step_ms", s * 1e3},
            {"tokens_per_s", tokens},
            {"model_tflops", tflops},
            {"mfu", or_null(peak ? std::optional<double>(tflops / *peak) : std::nullopt)}});
    }
  }
  return gpt_single_s;
}

void bench_gpt2(const std::string& gpu, int reps) {
  constexpr int64_t kVocabPadded = 50304, kT = 1024, kB = 16, kD = 768;
  constexpr int kL = 12, kH = 12;
  const Tokens data(kB, kT, 50257);
  const auto peak = peak_tflops(gpu, CudaPrecision::bf16);
  double one_stage_s = 0;
  for (const int S : {1, 2}) {
    try {
      const int M = S == 1 ? 1 : 8;
      std::vector<std::unique_ptr<pt::Backend>> owned;
      std::vector<pt::Backend*> devices;
      for (int d = 0; d < S; ++d) {
        owned.push_back(pt::make_cuda_backend(0, d, CudaPrecision::bf16));
        devices.push_back(owned.back().get());
      }
      pt::Model m = pt::gpt(kVocabPadded, kT, kD, kL, kH);
      const double flops_per_token = 6.0 * static_cast<double>(m.unique_param_count()) +
                                     6.0 * kL * kD * static_cast<double>(kT);
      pt::PipelineConfig pc;
      pc.trainer = adamw(M);
      pc.schedule = pt::sched::add_communication(pt::sched::generate("1f1b", S, M));
      const int per_stage = m.num_layers() / S;
      pc.layers_per_stage = S == 1 ? std::vector<int>{m.num_layers()}
                                   : std::vector<int>{per_stage, m.num_layers() - per_stage};
      pt::PipelineTrainer pipeline(m, devices, pc);
      auto step = [&] {
        pipeline.train_step(data.hx, data.hy);
        for (pt::Backend* d : devices) d->synchronize();
      };
      step();  // warm-up, outside the peak
      for (pt::Backend* d : devices) d->reset_peak();
      const auto t = pt::bench::spread_of(pt::bench::repeated_seconds(1, reps, step));
      size_t peak_bytes = 0;
      for (pt::Backend* d : devices)
        peak_bytes = std::max(peak_bytes, d->memory_stats().peak_bytes);
      if (S == 1) one_stage_s = t.median;
      const auto tokens = pt::bench::rate_of(t, static_cast<double>(kB * kT));
      emit({{"bench", std::string("gpu_gpt2")},
            {"stages", int64_t{S}},
            {"microbatches", int64_t{M}},
            {"schedule", std::string("1f1b")},
            {"step_ms", t.median * 1e3},
            {"step_ms_min", t.min * 1e3},
            {"step_ms_max", t.max * 1e3},
            {"tokens_per_s", tokens.median},
            {"tokens_per_s_min", tokens.min},
            {"tokens_per_s_max", tokens.max},
            {"mfu",
             or_null(peak ? std::optional<double>(tokens.median * flops_per_token / 1e12 / *peak)
                          : std::nullopt)},
            {"peak_mib", static_cast<double>(peak_bytes) / (1 << 20)},
            {"ratio_to_one_stage", one_stage_s > 0 ? one_stage_s / t.median : kNaN},
            {"reps", int64_t{t.reps}}});
    } catch (const std::exception& e) {  // out of memory, say: in the JSON, and go on
      emit({{"bench", std::string("gpu_gpt2")},
            {"stages", int64_t{S}},
            {"error", std::string(e.what())}});
    }
  }
}

void bench_pipeline(double single_s, int reps) {
  const int S = 2, M = 8;
  const bool two_gpus = pt::cuda_status().devices.size() >= 2;
  std::vector<std::unique_ptr<pt::Backend>> owned;
  std::vector<pt::Backend*> devices;
  for (int d = 0; d < S; ++d) {
    owned.push_back(pt::make_cuda_backend(two_gpus ? d : 0, two_gpus ? 0 : d, CudaPrecision::fp32));
    devices.push_back(owned.back().get());
  }
  const Tokens data(kBatch, kContext, kVocab);
  for (const std::string schedule : {"gpipe", "1f1b", "zb-h1"}) {
    pt::Model m = gpt_model();
    pt::PipelineConfig pc;
    pc.trainer = adamw(M);
    pc.schedule = pt::sched::add_communication(pt::sched::generate(schedule, S, M));
    const int per_stage = m.num_layers() / S;
    pc.layers_per_stage = {per_stage, m.num_layers() - per_stage};
    pt::PipelineTrainer pipeline(m, devices, pc);
    const double s = best_seconds(1, reps, [&] {
      pipeline.train_step(data.hx, data.hy);
      for (pt::Backend* d : devices) d->synchronize();
    });
    // Each stage does half of a micro-batch's work: F : (I + W) = 1 : 2 of single / (S M).
    const double unit = single_s / (3.0 * S * M);
    pt::sched::SimConfig sim;
    pt::sched::StageTimes st;
    st.f = unit;
    st.i = schedule == "zb-h1" ? unit : 2 * unit;
    st.w = schedule == "zb-h1" ? unit : 0;
    sim.stages = {st};
    const double predicted = pt::sched::simulate(pc.schedule, sim).step_time;
    emit({{"bench", std::string("gpu_pipeline")},
          {"schedule", schedule},
          {"stages", int64_t{S}},
          {"gpus", int64_t{two_gpus ? 2 : 1}},
          {"microbatches", int64_t{M}},
          {"step_ms", s * 1e3},
          {"single_ms", single_s * 1e3},
          {"predicted_ms", predicted * 1e3},
          {"predicted_over_measured", predicted / s}});
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench/gpu: GEMM, copies, training throughput and pipelines on a GPU (JSON lines)"};
  int reps = 5;
  app.add_option("--reps", reps, "timed repetitions per measurement (best is reported)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  const pt::CudaStatus& cuda = pt::cuda_status();
  if (!cuda.available) {
    std::printf("skipped: %s\n", cuda.message.c_str());
    return 77;
  }
  const std::string gpu = cuda.devices[0].name;
  emit({{"bench", std::string("gpu_device")},
        {"device", cuda.devices[0].str()},
        {"runtime", cuda.message}});
  bench_gemm(gpu, reps);
  bench_copies(reps);
  bench_attention(std::max(reps, 5));
  const double single_s = bench_train(gpu, reps);
  bench_pipeline(single_s, reps);
  bench_gpt2(gpu, std::max(reps, 5));
  return 0;
}
