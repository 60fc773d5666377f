#!/usr/bin/env bash
# Full sharding (ZeRO-3 / FSDP) against pipelines, as pipetrain-plan predicts them (issue 35): for
# each GPT of Narayanan et al.'s Table 1 (SC'21; scripts/megatron-table.sh) at its GPU count and
# global batch, on the Selene cluster file (A100 80 GB, 8 per node, 25 GB/s per GPU between nodes)
# and on copies of it whose inter-node link is 4x slower and 4x faster, three searches:
#   no full sharding   --shard none: T x S x R, pipelines and plain data parallelism (Megatron's)
#   full sharding only --shard full --stages 1: FSDP over R replicas, with T (FSDP + TP, as
#                      torchtitan's 2D), no pipeline
#   both               --shard both: what the planner chooses (pipelines x sharding included)
# the two that shard with prefetch (--shard-prefetch true: pipetrain-plan's default, as FSDP's: a
# gather runs while the layer before computes) and without (every collective waited for).
# Full activation recomputation (every:1) and Megatron's schedules, as megatron-table.sh.
#
#   scripts/fsdp-crossover.sh BUILD_DIR [ROWS]   a markdown table (ROWS: e.g. 1-4; default all)
#
# Columns: t,p,d (tensor, pipeline, data-parallel degrees), M micro-batches, step seconds, peak
# GiB per GPU. "idle": the best unsharded plan's idle time per step (bubble x step: fill, drain,
# the all-reduce); "waits": what full sharding's gathers and reduce-scatters add to its step.
# About 5 minutes on one core.
set -euo pipefail
build=${1:?usage: scripts/fsdp-crossover.sh BUILD_DIR [ROWS]}
pick=${2:-1-10}
exe=$build/examples/pipetrain-plan
selene=$(dirname "$0")/../examples/plan/clusters/selene-a100.txt
[ -x "$exe" ] || { echo "error: $exe is missing: build the pipetrain-plan target" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The cluster with another inter-node bandwidth per GPU (GB/s).
cluster() {
  local file=$tmp/inter-$1.txt
  [ -f "$file" ] || sed "s/^inter_node_gb_per_s .*/inter_node_gb_per_s    $1/" "$selene" >"$file"
  echo "$file"
}

# params(B) heads hidden layers GPUs batch (Table 1)
rows='1.7 24 2304 24 32 512
3.6 32 3072 30 64 512
7.5 32 4096 36 128 512
18.4 48 6144 40 256 1024
39.1 64 8192 48 512 1536
76.1 80 10240 60 1024 1792
145.6 96 12288 80 1536 2304
310.1 128 16384 96 1920 2160
529.6 128 20480 105 2520 2520
1008.0 160 25600 128 3072 3072'
rows=$(sed -n "${pick/-/,}p" <<<"$rows")
schedules=1f1b,interleaved:2,interleaved:3,interleaved:4  # Megatron's, as megatron-table.sh

# The best row of one search as "t p d M step_s peak_gib bubble_pct allreduce_s gathers_s shard",
# or "none" when nothing fits.
best() {
  local out
  if ! out=$("$exe" "$@" --top 1 2>&1); then
    grep -q 'no plan of the' <<<"$out" && { echo none; return; }
    echo "error: pipetrain-plan $*: $out" >&2; exit 1
  fi
  # rank step bubble peak samples/s TFLOP/s allreduce neighbours T x S x R M schedule recompute
  # [shard gathers]
  grep -E '^ +1 +[0-9.]+ ' <<<"$out" | awk '{
    gathers = NF >= 18 ? $18 : "0ms"; shard = NF >= 18 ? $17 : "none";
    sub(/ms$/, "", gathers); ar = $7; sub(/ms$/, "", ar); bubble = $3; sub(/%$/, "", bubble);
    printf "%s %s %s %s %.3f %.1f %s %.3f %.3f %s\n", $9, $11, $13, $14, $2 / 1e3, $4, bubble,
      ar / 1e3, gathers / 1e3, shard }'
}

echo "| model | GPUs | batch | inter-node GB/s | no full sharding: t,p,d, M: step s (idle s) | full sharding only, prefetch: t,d, M, GiB: step s (waits s) | without prefetch: step s (waits s) | planner's choice | without prefetch | why |"
echo "|---|---|---|---|---|---|---|---|---|---|"
# What a choice is: a pipeline (p > 1), plain data parallelism, full sharding (p = 1), or a
# pipeline whose replicas shard their stages.
kind() {
  case "$2,$1" in
    full,1) echo "full sharding" ;; full,*) echo "pipeline x full sharding" ;;
    *,1) echo "data parallel" ;; *) echo pipeline ;;
  esac
}
while read -r params heads hidden layers gpus batch; do
  for link in 6.25 25 100; do
    model=(--gpt-layers "$layers" --gpt-width "$hidden" --heads "$heads" --context 2048
      --vocab 51200 --cluster "$(cluster "$link")" --devices "$gpus" --batch "$batch"
      --recompute every:1 --schedules "$schedules" --simulate 48)
    # Each search on its own line, so that a failing one stops the script (set -e).
    unsharded=$(best "${model[@]}" --shard none)
    fsdp_ahead=$(best "${model[@]}" --shard full --stages 1)
    fsdp_bare=$(best "${model[@]}" --shard full --stages 1 --shard-prefetch false)
    both_ahead=$(best "${model[@]}" --shard both)
    both_bare=$(best "${model[@]}" --shard both --shard-prefetch false)
    read -r pt pp pd pm pstep _ pbub par _ _ <<<"$unsharded"
    read -r ft _ fd fm fstep fpeak _ far fgat _ <<<"$fsdp_ahead"
    read -r _ _ _ _ xstep _ _ xar xgat _ <<<"$fsdp_bare"
    read -r bt bp bd _ bstep _ _ _ _ bshard <<<"$both_ahead"
    read -r ot op od _ ostep _ _ _ _ oshard <<<"$both_bare"
    idle=$(awk -v b="$pbub" -v s="$pstep" 'BEGIN { printf "%.2f", b / 100 * s }')
    choice=$(kind "$bp" "$bshard")
    if [ "$ft" = none ]; then
      fsdp="does not fit"; bare="-"
      why="full sharding alone does not fit 80 GB"
    else
      waits=$(awk -v g="$fgat" -v r="$far" 'BEGIN { printf "%.2f", g + r }')
      xwaits=$(awk -v g="$xgat" -v r="$xar" 'BEGIN { printf "%.2f", g + r }')
      fsdp="$ft,$fd, $fm, $fpeak: $fstep ($waits)"
      bare="$xstep ($xwaits)"
      case "$choice" in
        "full sharding")
          why="its gathers hide behind compute (waits $waits s < the pipeline's idle $idle s)" ;;
        pipeline)
          if awk -v c="$waits" -v i="$idle" 'BEGIN { exit !(c > i) }'; then
            why="its gathers outgrow the compute that hides them (waits $waits s > the pipeline's idle $idle s)"
          else
            why="waits $waits s < the pipeline's idle $idle s, but its t = $ft (pipeline's $pt) costs more"
          fi ;;
        "data parallel") why="plain data parallelism fits: its all-reduce ($par s) moves 2/3 of full sharding's bytes" ;;
        *) why="the pipeline's replicas shard their stages: a reduce-scatter (half an all-reduce's bytes) after it, the gathers hidden" ;;
      esac
      bare_choice=$(kind "$op" "$oshard")
      if [ "$bare_choice" != "$choice" ]; then
        why="$why; without prefetch ($xwaits s of waits): $bare_choice"
      fi
    fi
    echo "| ${params}B | $gpus | $batch | $link | $pt,$pp,$pd, $pm: $pstep ($idle) | $fsdp | $bare | $choice $bt,$bp,$bd: $bstep | $(kind "$op" "$oshard") $ot,$op,$od: $ostep | $why |"
  done
done <<<"$rows"
