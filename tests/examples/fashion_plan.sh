#!/usr/bin/env bash
# pipetrain-fashion --plan auto (engine/plan/planner.h):
#  - --plan-only prints the ranked table, the rejected classes, the chosen plan as flags and
#    that plan's partition, and trains nothing;
#  - the chosen flags, typed by hand, plan the same prediction as --plan auto did;
#  - a --mem-cap keeps every listed plan under it; --costs profile times the layers on both
#    devices at once (with --plan auto and with a plan of the user's own), measures the epilogue and the all-reduce, weighs one device with both
#    threads against the best plan of the two devices and chooses the faster;
#  - --plan auto --steps 4 trains and prints the chosen plan's predicted vs measured step time;
#  - the flags it chooses itself, --plan other than auto, "auto" devices and a cap nothing fits
#    are refused before anything runs, naming the flag and the fix.
#
#   fashion_plan.sh <pipetrain-fashion> [data dir]
set -uo pipefail
exe=$1
data=${2:-/usr/share/datasets/fashion-mnist}
here=$(dirname "$0")
fails=0
source "$here/expect.sh"  # expect_error, expect_refused

plan=(--devices cpu:0,cpu:1 --threads 1 --plan auto)

expect_refused "--plan auto chooses --stages itself: drop --stages" "${plan[@]}" --stages 2 --steps 1
expect_refused "--plan auto chooses --stages itself" "${plan[@]}" --stages 1 --steps 1
expect_refused "--plan auto chooses --dp itself" "${plan[@]}" --dp 2 --steps 1
expect_refused "--plan auto chooses --tp itself" "${plan[@]}" --tp 2 --steps 1
expect_refused "--plan auto chooses --microbatches itself" "${plan[@]}" --microbatches 4 --steps 1
expect_refused "--plan auto chooses --schedule itself" "${plan[@]}" --schedule gpipe --steps 1
expect_refused "--plan auto chooses --recompute itself" "${plan[@]}" --recompute always --steps 1
expect_refused "--plan fast is not a planning mode: use --plan auto" --plan fast --steps 1
expect_refused "--plan auto plans over the devices it is given: list them" --plan auto --steps 1
expect_refused "raise --mem-cap to at least" "${plan[@]}" --mem-cap 1 --steps 1
expect_refused "--plan auto plans synchronous" "${plan[@]}" --update async --steps 1

# --plan-only: the table, the choice as flags, the chosen plan's partition; no training.
out=$("$exe" "${plan[@]}" --plan-only --plan-top 5 2>&1); rc=$?
rows=$(grep -cE '^ +[0-9]+ +[0-9.]+ +[0-9.]+% ' <<<"$out")
flags=$(grep -A1 'plan auto chose' <<<"$out" | tail -1 | sed 's/^ *//')
if [ $rc -ne 0 ] || [ "$rows" -ne 5 ] || ! grep -q '^rank' <<<"$out" || [ -z "$flags" ] ||
   ! grep -qE -- '--stages [0-9]+ --dp [0-9]+( --tp [0-9]+)? --microbatches [0-9]+ --schedule ' <<<"$flags" ||
   ! grep -q '^rejected ' <<<"$out" || ! grep -q '^predicted step time' <<<"$out" ||
   grep -qE '^train [0-9]' <<<"$out"; then
  echo "FAIL: --plan auto --plan-only (rc=$rc, $rows rows, flags '$flags'):"; echo "$out"; fails=$((fails+1))
else
  echo "ok: --plan auto --plan-only: $rows rows; chose $flags"
fi

# The chosen flags by hand: the same partition and the same predicted pipeline step.
predicted_auto=$(grep '^predicted step time' <<<"$out")
# shellcheck disable=SC2086
by_hand=$("$exe" $flags --threads 1 --plan-only 2>&1); rc=$?
if [ $rc -ne 0 ] || [ "$(grep '^predicted step time' <<<"$by_hand")" != "$predicted_auto" ]; then
  echo "FAIL: the chosen flags by hand plan differently (rc=$rc): '$predicted_auto' vs:"; echo "$by_hand"; fails=$((fails+1))
else
  echo "ok: the chosen flags by hand: $predicted_auto"
fi


# A cap below the data-parallel plans' peak (about 46-50 MiB): every listed plan fits under it,
# the ones over it are listed as rejected, and the chosen flags carry the cap.
out=$("$exe" "${plan[@]}" --plan-only --plan-top 20 --mem-cap 30 2>&1); rc=$?
over=$(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+% ' <<<"$out" | awk '{for (i = 4; i <= NF && $i ~ /^[0-9.]+$/; ++i) if ($i > 30) print}')
if [ $rc -ne 0 ] || [ -n "$over" ] || ! grep -q 'over the memory cap' <<<"$out" ||
   ! grep -A1 'plan auto chose' <<<"$out" | grep -qE -- '(--stages 2 .*|--tp 2 .*)--mem-cap 30'; then
  echo "FAIL: --plan auto --mem-cap 30 (rc=$rc, over: '$over'):"; echo "$out"; fails=$((fails+1))
else
  echo "ok: --plan auto --mem-cap 30: $(grep -A1 'plan auto chose' <<<"$out" | tail -1)"
fi

# Profiled costs: timed on both devices at once, one table per micro-batch size; the epilogue
# and the all-reduce measured; one device with both threads weighed against the table's best,
# and the faster of the two chosen.
out=$("$exe" "${plan[@]}" --plan-only --plan-top 3 --costs profile --batch 32 2>&1); rc=$?
merged=$(sed -nE 's/^plan auto: one device with all 2 threads \(cpu:0\): best M = [0-9]+, predicted ([0-9.]+) ms per step .* against ([0-9.]+) for the best plan of the 2 devices as given$/\1 \2/p' <<<"$out")
chose=$(grep -A1 'plan auto chose' <<<"$out" | tail -1)
if [ -n "$merged" ]; then
  read -r one two <<<"$merged"
  want=$(awk -v a="$one" -v b="$two" 'BEGIN { print (a < b) ? "--devices cpu:0 --threads 2 --stages 1 --dp 1" : "--devices cpu:0,cpu:1 --stages" }')
fi
if [ $rc -ne 0 ] || ! grep -q 'plan auto: costs profiled on cpu:0..cpu:1 at once' <<<"$out" ||
   ! grep -qE 'all-reduce [0-9.]+ GB/s .*measured in-process' <<<"$out" ||
   ! grep -qE 'epilogue [0-9.]+ ns per parameter .*measured on' <<<"$out" ||
   [ -z "$merged" ] || ! grep -q -- "$want" <<<"$chose" || ! grep -q -- '--costs profile' <<<"$chose"; then
  echo "FAIL: --plan auto --costs profile (rc=$rc, one device with 2 threads / best as given: $merged):"
  echo "$out"; fails=$((fails+1))
else
  echo "ok: --plan auto --costs profile (one device with 2 threads / best as given: $merged ms): $chose"
fi

# A plan of the user's own (--stages 2) with --costs profile: timed the same way, both devices at
# once (it used to time every layer on cpu:0 alone).
out=$("$exe" --devices cpu:0,cpu:1 --threads 1 --stages 2 --costs profile --plan-only --batch 32 2>&1)
rc=$?
if [ $rc -ne 0 ] || ! grep -q '^partition (time, costs profiled on cpu:0..cpu:1 at once):' <<<"$out" ||
   ! grep -qE '^predicted step time [0-9.]+ ms' <<<"$out"; then
  echo "FAIL: --stages 2 --costs profile --plan-only (rc=$rc):"; echo "$out"; fails=$((fails+1))
else
  echo "ok: --stages 2 --costs profile: $(grep '^partition (' <<<"$out")"
fi

if [ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ]; then
  out=$("$exe" "${plan[@]}" --data "$data" --steps 4 --batch 64 --plan-top 3 2>&1); rc=$?
  line=$(grep '^plan auto: the chosen plan' <<<"$out")
  if [ $rc -ne 0 ] || ! grep -q '^trained 4 steps' <<<"$out" ||
     ! grep -qE 'predicted [0-9.]+ ms per step .* measured [0-9.]+ ms' <<<"$line" ||
     grep -qiE 'nan|inf ms' <<<"$line"; then
    echo "FAIL: --plan auto --steps 4 (rc=$rc):"; echo "$out"; fails=$((fails+1))
  else
    echo "ok: --plan auto --steps 4: $line"
  fi
else
  echo "skip: no Fashion-MNIST data in $data for the training run"
fi

[ $fails -eq 0 ] && echo "all fashion_plan checks passed"
exit $((fails > 0))
