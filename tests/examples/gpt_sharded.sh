#!/usr/bin/env bash
# pipetrain-gpt --shard-optimizer and --shard full: GPT's tied embeddings (tok_emb and lm_head in
# different stages) with the optimizer state (ZeRO-1), or parameters, gradients and optimizer
# state (full sharding; the tied units stay whole) split between 2 replicas. The sharded run's
# checkpoint (weights and AdamW state) is bit-identical to the unsharded run's; saved at step 2
# and resumed sharded, it ends bit-identical to the uninterrupted run; a fully sharded run samples
# text from its gathered weights. In one process (4 virtual CPU devices), and with --mpi (a build
# with MPI) under mpirun -np 4 too; and with --tp 2 under mpirun -np 8 (fully sharded tensor
# ranks == --tp alone; resumed at --tp 1).
#
#   gpt_sharded.sh <pipetrain-gpt> [--mpi]
set -uo pipefail
exe=$1
with_mpi=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
compare="python3 $here/compare_checkpoints.py"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
for i in $(seq 1 200); do echo "Line $i: In the beginning God created the heaven and the earth, $((i * 7919 % 1000))."; done > "$work/text.txt"
base=(--context 32 --d-model 32 --layers 2 --heads 2 --batch 4 --eval-windows 8 --eval-every 0
      --data "$work/text.txt" --stages 2 --dp 2 --timeout 60)
check() {  # check TAG SHARD-FLAGS: the four runs with ${launch[@]} (env: one process)
  local tag=$1 flags=$2
  local ok=1
  for run in "plain --steps 4" "shard --steps 4 $flags" "half --steps 2 $flags" \
             "resumed --steps 4 $flags --resume $work/$tag-half"; do
    local name=${run%% *} args=${run#* }
    # shellcheck disable=SC2086
    if ! timeout 300 "${launch[@]}" "$exe" "${base[@]}" "${extra[@]}" --sample-bytes 0 $args \
         --save "$work/$tag-$name" \
         > "$work/$tag-$name.txt" 2>&1; then
      fail "$tag: $name exited with an error:"; tail -20 "$work/$tag-$name.txt"; ok=0; break
    fi
  done
  [ $ok = 1 ] || return
  if [ "$flags" = --shard-optimizer ]; then
    grep -q "optimizer state: .* (1/2 of" "$work/$tag-shard.txt" || fail "$tag: no optimizer state line"
  else
    grep -q "gathered during the step: at most" "$work/$tag-shard.txt" \
      || fail "$tag: no memory line with the gathered bytes"
  fi
  $compare "$work/$tag-plain" "$work/$tag-shard" && echo "ok: $tag: sharded == unsharded" \
    || fail "$tag: sharded != unsharded"
  $compare "$work/$tag-plain" "$work/$tag-resumed" && echo "ok: $tag: resumed == uninterrupted" \
    || fail "$tag: resumed != uninterrupted"
}
sample() {  # sample TAG: a fully sharded run samples from its gathered weights, as a plain one
  local tag=$1
  for name in plain full; do
    local flags=(); [ $name = full ] && flags=(--shard full)
    if ! timeout 300 "${launch[@]}" "$exe" "${base[@]}" "${extra[@]}" --steps 2 --sample-bytes 24 \
         --prompt "In the" "${flags[@]}" > "$work/$tag-sample-$name.txt" 2>&1; then
      fail "$tag: sampling ($name) exited with an error:"; tail -20 "$work/$tag-sample-$name.txt"; return
    fi
  done
  # The text after the "sample (24 bytes in 0.0 s; ...)" header: the header holds a time.
  if diff <(grep -a -A3 "^sample" "$work/$tag-sample-plain.txt" | tail -n +2) \
          <(grep -a -A3 "^sample" "$work/$tag-sample-full.txt" | tail -n +2) >/dev/null \
     && grep -aq "^sample" "$work/$tag-sample-full.txt"; then
    echo "ok: $tag: --shard full samples the same text as the plain run"
  else
    fail "$tag: --shard full sampled other text than the plain run"
  fi
}
launch=(env); extra=(--devices cpu:0..3)
check local --shard-optimizer
check local-full "--shard full"
sample local
if [ "$with_mpi" = --mpi ] && command -v mpirun >/dev/null; then
  launch=(mpirun -np 4 --oversubscribe); extra=(--threads 1)
  check mpi --shard-optimizer
  check mpi-full "--shard full"
  sample mpi
  # With tensor parallelism (8 processes: 2 stages x 2 replicas x 2 tensor ranks): fully sharded
  # == --tp alone, bit for bit; its checkpoint (whole tensors) resumed at --tp 1 fully sharded in
  # one process ends within 1e-5 of the --tp 2 run resumed under mpirun (slices add up in
  # another order).
  tp=(--steps 4 --tp 2 --sample-bytes 0)
  if timeout 300 mpirun -np 8 --oversubscribe "$exe" "${base[@]}" "${extra[@]}" "${tp[@]}" \
       --save "$work/tp" > "$work/tp.txt" 2>&1 \
     && timeout 300 mpirun -np 8 --oversubscribe "$exe" "${base[@]}" "${extra[@]}" "${tp[@]}" \
       --shard full --save "$work/tp-full" > "$work/tp-full.txt" 2>&1; then
    $compare "$work/tp" "$work/tp-full" && echo "ok: mpi: --tp 2 --shard full == --tp 2" \
      || fail "mpi: --tp 2 --shard full != --tp 2"
  else
    fail "mpi: the --tp 2 runs exited with an error"; tail -20 "$work/tp-full.txt"
  fi
  if timeout 300 mpirun -np 8 --oversubscribe "$exe" "${base[@]}" "${extra[@]}" --tp 2 --steps 6 \
       --sample-bytes 0 --resume "$work/tp-full" --save "$work/tp-6" > "$work/tp-6.txt" 2>&1 \
     && timeout 300 "$exe" "${base[@]}" --devices cpu:0..3 --threads 1 --steps 6 --sample-bytes 0 \
       --shard full --resume "$work/tp-full" --save "$work/t1-6" > "$work/t1-6.txt" 2>&1; then
    $compare --tolerance 1e-5 "$work/tp-6" "$work/t1-6" >/dev/null \
      && echo "ok: a --tp 2 --shard full checkpoint resumes at --tp 1 --shard full" \
      || fail "the --tp 2 --shard full checkpoint resumed at --tp 1 differs"
  else
    fail "resuming the --tp 2 --shard full checkpoint"; tail -20 "$work/t1-6.txt"
  fi
else
  echo "no --mpi or no mpirun: the multi-process part is skipped"
fi
[ $fails -eq 0 ] && echo "all GPT sharding checks passed" || echo "$fails check(s) failed"
exit $((fails > 0))
