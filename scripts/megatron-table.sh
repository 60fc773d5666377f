#!/usr/bin/env bash
# Narayanan et al., SC'21, "Efficient Large-Scale Language Model Training on GPU Clusters Using
# Megatron-LM", Table 1 (weak scaling of GPT on Selene), against pipetrain-plan: for each row the
# same model (seq 2048, vocab 51,200, the row's heads, width and layers), global batch and GPU
# count, on the cluster of examples/plan/clusters/selene-a100.txt (A100 80 GB, 8 per node,
# NVLink, 8 x 200 Gb/s InfiniBand; one achieved fraction of the 312 TFLOP/s peak for all rows).
# The planner chooses T (tensor parallel), S (pipeline stages), R (data-parallel replicas), M
# and the schedule; its TFLOP/s per GPU is the paper's count, 96 B s l h^2 (1 + s/(6h) +
# V/(16 l h)) per step, over the predicted step and the GPUs. Searched as the paper ran: full
# activation recomputation, one checkpoint per layer (every:1; the count includes its FLOPs),
# and Megatron's schedules (1F1B, interleaved).
#
#   scripts/megatron-table.sh BUILD_DIR      plain table, then one JSON line per row
#
# d = GPUs / (t p); mb: samples per micro-batch, B / (R M). About a minute on one core.
set -euo pipefail
build=${1:?usage: scripts/megatron-table.sh BUILD_DIR}
exe=$build/examples/pipetrain-plan
cluster=$(dirname "$0")/../examples/plan/clusters/selene-a100.txt
[ -x "$exe" ] || { echo "error: $exe is missing: build the pipetrain-plan target" >&2; exit 2; }

# params(B) heads hidden layers t p GPUs batch TFLOP/s-per-GPU (published)
rows='1.7 24 2304 24 1 1 32 512 137
3.6 32 3072 30 2 1 64 512 138
7.5 32 4096 36 4 1 128 512 142
18.4 48 6144 40 8 1 256 1024 135
39.1 64 8192 48 8 2 512 1536 138
76.1 80 10240 60 8 4 1024 1792 140
145.6 96 12288 80 8 8 1536 2304 148
310.1 128 16384 96 8 16 1920 2160 155
529.6 128 20480 105 8 35 2520 2520 163
1008.0 160 25600 128 8 64 3072 3072 163'

fmt='%7s %5s %5s | %2s %3s %4s %7s | %2s %3s %4s %3s %4s %-14s %7s %7s\n'
echo "                     | paper                 | pipetrain-plan (predicted)"
printf "$fmt" params GPUs batch t p d TFLOP/s T S R mb M schedule TFLOP/s diff
json=""
while read -r params heads hidden layers t p gpus batch published; do
  out=$("$exe" --gpt-layers "$layers" --gpt-width "$hidden" --heads "$heads" --context 2048 \
        --vocab 51200 --cluster "$cluster" --devices "$gpus" --batch "$batch" \
        --recompute every:1 --schedules 1f1b,interleaved:2,interleaved:3,interleaved:4 \
        --simulate 48 --top 1)
  # rank step bubble peak samples/s TFLOP/s allreduce neighbours T x S x R M schedule recompute
  read -r _ step bubble peak _ tflops _ neighbours T _ S _ R M schedule _ \
    < <(grep -E '^ +1 +[0-9.]+ ' <<<"$out")
  d=$((gpus / (t * p)))
  mb=$((batch / (R * M)))
  diff=$(awk -v a="$tflops" -v b="$published" 'BEGIN { printf "%+.1f%%", 100 * (a / b - 1) }')
  printf "$fmt" "$params" "$gpus" "$batch" "$t" "$p" "$d" "$published" \
    "$T" "$S" "$R" "$mb" "$M" "$schedule" "$tflops" "$diff"
  json+=$(printf '{"params_b": %s, "heads": %s, "hidden": %s, "layers": %s, "gpus": %s, "batch": %s, "paper": {"t": %s, "p": %s, "d": %s, "tflops_per_gpu": %s}, "predicted": {"t": %s, "p": %s, "d": %s, "microbatch_size": %s, "microbatches": %s, "schedule": "%s", "neighbours": "%s", "step_s": %s, "bubble": "%s", "peak_gib": %s, "tflops_per_gpu": %s}, "diff": "%s"}' \
    "$params" "$heads" "$hidden" "$layers" "$gpus" "$batch" "$t" "$p" "$d" "$published" \
    "$T" "$S" "$R" "$mb" "$M" "$schedule" "$neighbours" \
    "$(awk -v s="$step" 'BEGIN { print s / 1e3 }')" "$bubble" "$peak" "$tflops" "$diff")$'\n'
done <<<"$rows"
printf '%s' "$json"
