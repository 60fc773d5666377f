#!/usr/bin/env bash
# pipetrain-fashion with a parameter server and pipeline stages (--ps K --dp R --stages S) under
# mpirun: world ranks [0, R x S) are the workers (replica r's stage s at r x S + s), the last K
# the servers. Each stage's worker pushes and pulls its own layers only.
#  - synchronous PS (-np 5: 1 server + 2 replicas x 2 stages) equals the in-process
#    --dp 2 --stages 2 all-reduce run bit for bit, weights and optimizer state (checkpoints
#    compared tensor by tensor), with clipping (the global norm over both stages' layers);
#  - its checkpoint at step 2 (the servers' optimizer state fetched into it), resumed under PS to
#    step 4 == 4 uninterrupted all-reduce steps, bit for bit;
#  - a launch with the wrong process count is refused before anything runs, naming the fix;
#  - a worker killed (-9) mid-run (world rank 3: replica 1's stage 1): the job ends naming it
#    within --timeout. No hang.
#
#   fashion_ps_stages.sh <pipetrain-fashion> <pipetrain-fashion-faults> [data dir]
# Needs the Fashion-MNIST files and mpirun; exits 77 (skip) without them.
set -uo pipefail
exe=$1
faults_exe=$2
data=${3:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$here/mpi_runs.sh"  # fail, run, same_all, expect_fail
run_extra="--stages 2"

# ---- synchronous == all-reduce, and checkpoints ----
# Steps 0-2 under PS == all-reduce at step 2; resumed from that checkpoint (the servers' optimizer
# state in it) to step 4 == 4 uninterrupted all-reduce steps. (mpirun runs are the slow part.)
run 0 --dp 2 --devices cpu:0..3 --steps 2 --clip 0.5 --save "$tmp/dp_half"
[ $rc -eq 0 ] || fail "--dp 2 --stages 2 reference (2 steps) failed"
run 0 --dp 2 --devices cpu:0..3 --steps 4 --clip 0.5 --save "$tmp/dp"
[ $rc -eq 0 ] || fail "--dp 2 --stages 2 reference failed"
run 5 --dp 2 --ps 1 --steps 2 --clip 0.5 --save "$tmp/ps_half"
[ $rc -eq 0 ] && grep -qF "workers: ranks 0..3" <<<"$out" &&
  grep -qF "layers of 2 stages" <<<"$out" || fail "-np 5 --ps 1 --dp 2 --stages 2 failed"
same_all "$tmp/dp_half" "$tmp/ps_half"
run 5 --dp 2 --ps 1 --steps 4 --clip 0.5 --resume "$tmp/ps_half" --save "$tmp/ps_resumed"
[ $rc -eq 0 ] || fail "-np 5 --resume failed"
same_all "$tmp/dp" "$tmp/ps_resumed"

# ---- refusal: 1 server + 2 x 2 workers need 5 processes ----
expect_fail 60 "start mpirun -np 5" 4 --dp 2 --ps 1 --steps 1

# ---- a dead worker (world rank 3: replica 1, stage 1): the job ends naming it ----
exe=$faults_exe
mpirun_flags="--mca orte_abort_on_non_zero_status 0" PIPETRAIN_FAULT=kill:3:2 \
  expect_fail 60 "world rank 3" 5 --dp 2 --ps 1 --steps 20 --timeout 3

[ $fails -eq 0 ] && echo "all parameter-server-with-stages cases passed" || { echo "$fails case(s) failed"; exit 1; }
