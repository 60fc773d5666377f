#!/usr/bin/env bash
# pipetrain-fashion under mpirun, one process per device, on loopback:
#  - parity: replicas x stages across processes train exactly what single-device gradient
#    accumulation over the same micro-batches trains (bit-identical where the additions happen in
#    the same order, else within the example's stated tolerance), checked by --parity-check on
#    every process;
#  - bad launches (process count that does not match --stages x --dp) are refused clearly;
#  - a rank that dies (SIGKILL) or stalls mid-run never leaves the others hanging: the job ends
#    within --timeout plus start-up, and the output names the missing rank (these run
#    pipetrain-fashion-faults, the test-only build with PIPETRAIN_FAULT compiled in).
#
#   fashion_mpi.sh <pipetrain-fashion> <pipetrain-fashion-faults> [data dir]
# Needs the Fashion-MNIST files (Debian's dataset-fashion-mnist); exits 77 (skip) without them.
set -uo pipefail
exe=$1
faults_exe=$2
data=${3:-/usr/share/datasets/fashion-mnist}
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
fails=0
run() {  # run NP args... (sets out, rc, secs)
  local np=$1; shift
  local t0=$SECONDS
  out=$(timeout 120 mpirun ${mpirun_flags:-} -np "$np" --oversubscribe "$exe" --data "$data" --batch 32 "$@" 2>&1); rc=$?
  secs=$((SECONDS - t0))
}
expect_ok() {  # expect_ok "must say" NP args...
  local want=$1; shift
  run "$@"
  if [ $rc -ne 0 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: mpirun -np $* gave rc=$rc, expected success saying '$want'. Output:"; echo "$out" | tail -30; fails=$((fails+1))
  else
    echo "ok ($secs s): mpirun -np $* -> $(grep -F -- "$want" <<<"$out" | head -1)"
  fi
}
expect_fail() {  # expect_fail MAX_SECONDS "must say" NP args...
  local max=$1 want=$2; shift 2
  run "$@"
  if [ $rc -eq 0 ] || [ $secs -gt "$max" ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: mpirun -np $* gave rc=$rc after $secs s (limit $max), expected a failure saying '$want'. Output:"
    echo "$out" | tail -30; fails=$((fails+1))
  else
    echo "ok ($secs s): mpirun -np $* -> rc=$rc, $(grep -F -- "$want" <<<"$out" | head -1)"
  fi
}

expect_ok "all 20 tensors are bit-identical" 2 --dp 2 --steps 3 --parity-check
expect_ok "all 10 tensors are bit-identical" 2 --stages 2 --microbatches 4 --schedule zb-h1 --steps 3 --parity-check
# A V across processes: each holds two stages (rank 0 the first and the last).
expect_ok "all 10 tensors are bit-identical" 2 --stages 2 --microbatches 4 --schedule dualpipev --steps 3 --parity-check
expect_ok "within the tolerance" 4 --stages 2 --dp 2 --microbatches 2 --bucket-mb 1 --steps 3 --parity-check
expect_ok "within the tolerance" 4 --dp 4 --microbatches 2 --steps 2 --parity-check

expect_fail 60 "start mpirun -np 6" 4 --stages 3 --dp 2 --steps 1
expect_fail 60 "--save-every needs --save" 2 --dp 2 --steps 1 --save-every 2

# Rank 2 (replica 1, stage 0) dies / stalls at the start of step 1, while the others are in it.
exe=$faults_exe
# What pipetrain itself promises, not mpirun: with mpirun told to leave the survivors alone
# (orte_abort_on_non_zero_status 0), they give up within --timeout and name the dead world rank.
mpirun_flags="--mca orte_abort_on_non_zero_status 0" PIPETRAIN_FAULT=kill:2:1 \
  expect_fail 60 "waiting for world rank 2" 4 --stages 2 --dp 2 --steps 4 --timeout 5
grep -qF "mpirun noticed" <<<"$out" && { echo "FAIL: mpirun ended the job, not pipetrain"; fails=$((fails+1)); }
# And with mpirun's default (it aborts the job when a process dies): still every process ends.
PIPETRAIN_FAULT=kill:2:1 expect_fail 60 "rank 2" 4 --stages 2 --dp 2 --steps 4 --timeout 5
PIPETRAIN_FAULT=stall:2:1 expect_fail 60 "rank 2" 4 --stages 2 --dp 2 --steps 4 --timeout 5
# The stalled rank's pipeline peer names the transfer it was waiting for.
grep -qF "1RECV_F" <<<"$out" || { echo "FAIL: the stall report does not name the waiting action:"; echo "$out" | tail -20; fails=$((fails+1)); }

[ $fails -eq 0 ] && echo "all mpirun cases passed" || { echo "$fails case(s) failed"; exit 1; }
