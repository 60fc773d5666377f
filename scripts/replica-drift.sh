#!/usr/bin/env bash
# How far apart two runs drift when only the grouping of the gradient sums differs: R = 2
# replicas of 2 micro-batches each (the replicas' sums are added) against one device adding the
# same 4 micro-batches in order. Both start from the same weights and see the same batches; the
# differences start at rounding level and compound over the steps. This is the tolerance a
# checkpoint resumed under another number of replicas can be held to (docs/checkpoints.md,
# "Resharding").
# Prints one JSON line per measured step: the largest |w_a - w_b| over all weights.
#
#   scripts/replica-drift.sh [build dir] [steps]
set -euo pipefail
build=${1:-build}
steps=${2:-64}
exe=$build/examples/pipetrain-fashion
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
common=(--batch 64 --seed 3 --threads 1 --steps "$steps" --log-every 100000 --save-every 1)
"$exe" "${common[@]}" --dp 2 --microbatches 2 --devices cpu:0..1 --save "$work/a" > "$work/a.txt"
"$exe" "${common[@]}" --microbatches 4 --save "$work/b" > "$work/b.txt"
for s in 1 2 4 8 12 16 20 24 28 32 40 48 56 64 96 128 192 256; do
  [ "$s" -le "$steps" ] || break
  n=$(printf %08d "$s")
  d=$(python3 "$here/tests/examples/compare_checkpoints.py" --quiet --weights-only --tolerance 1e9 \
        "$work/a/step-$n" "$work/b/step-$n" | sed -n 's/.*largest difference \([0-9.e+-]*\).*/\1/p')
  echo "{\"bench\": \"replica_drift\", \"step\": $s, \"max_abs_weight_difference\": ${d:-0}}"
done
