#!/usr/bin/env bash
# --tp T (tensor parallelism) as a user runs it, in one process and under mpirun:
#  - refusals before anything runs: a T that does not divide the layers, too few devices or
#    processes, and the modes it does not combine with yet; --plan auto chooses T itself;
#  - one process per device (mpirun -np 4: 2 stages x 2 tensor ranks; -np 8: 2 x 2 x 2) saves
#    the same checkpoint bits as one process with as many virtual devices (the same sums in the
#    same order), optimizer state included;
#  - a checkpoint saved at --tp 2 holds whole tensors: pipetrain-ckpt verifies it, and resuming
#    it at --tp 1 and --tp 4 ends within 1e-5 of the uninterrupted --tp 2 run (the sums change
#    order; tests/tensor_parallel/training_test.cpp bounds the same in-process at 1e-6), at
#    --tp 2 under mpirun bit for bit;
#  - the run says once which layers with parameters stay whole on every rank.
#
#   fashion_tensor_parallel.sh <pipetrain-fashion> <pipetrain-ckpt> [data dir]
# Needs the Fashion-MNIST files and mpirun; exits 77 (skip) without them.
set -uo pipefail
exe=$1
ckpt=$2
data=${3:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
compare="python3 $here/compare_checkpoints.py"
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
source "$here/expect.sh"  # expect_refused
common=(--data "$data" --batch 32 --seed 7 --threads 1 --timeout 30 --clip 0.5 --no-shuffle)

# 1. Refusals, exit 2 before training.
expect_refused "does not split across 3 tensor-parallel ranks" "${common[@]}" --tp 3 --devices cpu:0..2 --steps 1
expect_refused "needs 4: give one device per stage, replica and tensor rank" "${common[@]}" --tp 2 --stages 2 --devices cpu:0,cpu:1 --steps 1
expect_refused "--tp 2 with --ps" "${common[@]}" --tp 2 --dp 2 --ps 1 --devices cpu:0..3 --steps 1
expect_refused "--tp 2 with --update async" --data "$data" --batch 32 --tp 2 --stages 2 --microbatches 2 --update async --devices cpu:0..3 --steps 1
expect_refused "--tp 2 with --shard-optimizer" "${common[@]}" --tp 2 --dp 2 --shard-optimizer --devices cpu:0..3 --steps 1
expect_refused "--plan auto chooses --tp itself" "${common[@]}" --tp 2 --plan auto --devices cpu:0..1 --steps 1

run() {  # run NAME args...: one process; output in $work/NAME.txt
  local name=$1; shift
  if ! timeout 300 "$exe" "${common[@]}" "$@" > "$work/$name.txt" 2>&1; then
    fail "$name: $* exited with $?:"; tail -20 "$work/$name.txt"; return 1
  fi
  echo "ok: $name: $*"
}
mpi() {  # mpi NAME NP args...
  local name=$1 np=$2; shift 2
  if ! timeout 300 mpirun -np "$np" --oversubscribe "$exe" "${common[@]}" "$@" > "$work/$name.txt" 2>&1; then
    fail "mpirun -np $np $* exited with $?:"; tail -20 "$work/$name.txt"; return 1
  fi
  echo "ok: $name: mpirun -np $np $*"
}
same() {  # same A B: bit for bit, optimizer state included
  if $compare "$work/$1" "$work/$2" >"$work/cmp.txt" 2>&1; then echo "ok: $1 == $2 (bit for bit)"
  else fail "$1 != $2"; cat "$work/cmp.txt"; fi
}
close() {  # close A B TOL: weights and optimizer state within TOL
  if $compare "$work/$1" "$work/$2" --tolerance "$3" >"$work/cmp.txt" 2>&1; then
    echo "ok: $1 ~ $2 ($(tail -1 "$work/cmp.txt"))"
  else fail "$1 !~ $2 within $3"; cat "$work/cmp.txt"; fi
}

# --plan auto searches T too: on 2 devices (estimated costs) it chooses 2 tensor ranks, and runs.
run auto --plan auto --devices cpu:0,cpu:1 --steps 2
if grep -A1 'plan auto chose' "$work/auto.txt" | grep -q -- '--tp 2' && grep -q '^trained 2 steps' "$work/auto.txt"; then
  echo "ok: --plan auto chose and ran $(grep -A1 'plan auto chose' "$work/auto.txt" | tail -1)"
else fail "--plan auto did not choose --tp 2 or did not train"; grep -A1 'plan auto chose' "$work/auto.txt"; fi

# 2. One process per device == one process, 2 stages x 2 tensor ranks and 2 x 2 x 2.
s2t2=(--stages 2 --tp 2 --microbatches 2 --steps 6)
run one_s2t2 "${s2t2[@]}" --devices cpu:0..3 --save "$work/one_s2t2"
grep -q "tensor-parallel ranks per stage" "$work/one_s2t2.txt" || fail "the start-up line does not say --tp"
grep -q "whole on every tensor-parallel rank (no split declared): layer 9 'linear'" "$work/one_s2t2.txt" || fail "the replicated layers are not named"
mpi mpi_s2t2 4 "${s2t2[@]}" --save "$work/mpi_s2t2"
same one_s2t2 mpi_s2t2
d2s2t2=(--dp 2 --stages 2 --tp 2 --microbatches 2 --steps 4)
run one_d2s2t2 "${d2s2t2[@]}" --devices cpu:0..7 --save "$work/one_d2s2t2"
mpi mpi_d2s2t2 8 "${d2s2t2[@]}" --save "$work/mpi_d2s2t2"
same one_d2s2t2 mpi_d2s2t2

# 3. Whole tensors in the checkpoint: resumed at another T.
if "$ckpt" verify "$work/one_s2t2" > "$work/verify.txt" 2>&1; then echo "ok: pipetrain-ckpt verify"
else fail "pipetrain-ckpt verify"; cat "$work/verify.txt"; fi
run at3 --stages 2 --tp 2 --microbatches 2 --steps 3 --devices cpu:0..3 --save "$work/at3"
run t1 --stages 2 --microbatches 2 --steps 6 --devices cpu:0..1 --resume "$work/at3" --save "$work/t1"
run t4 --tp 4 --microbatches 2 --steps 6 --devices cpu:0..3 --resume "$work/at3" --save "$work/t4"
close one_s2t2 t1 1e-5
close one_s2t2 t4 1e-5
mpi mpi_resumed 4 "${s2t2[@]}" --resume "$work/at3" --save "$work/mpi_resumed"
same one_s2t2 mpi_resumed

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
