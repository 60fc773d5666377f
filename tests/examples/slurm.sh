#!/usr/bin/env bash
# pipetrain launched through a real Slurm controller: a one-node cluster on this machine
# (scripts/slurm-local.sh, started here and stopped on any exit), Debian 12's Slurm 22.05 and
# Open MPI 4.1.4. The ranks are started by `srun --mpi=pmix`, which works with Debian's packages
# (Open MPI finds Slurm's PMIx server; no mpirun, no salloc).
#  1. srun -n 4: 2 stages x 2 replicas, 10 steps, saves a checkpoint; a second job, srun -n 2
#     (2 stages, 1 replica of 2 micro-batches: the same additions in the same order), resumes it
#     to step 20: bit-identical (weights and optimizer state) to one uninterrupted 20-step job,
#     and the same loss at every step after the resume.
#  2. scancel of a running srun job (Slurm sends SIGTERM, then SIGKILL after KillWait, 30 s
#     here): the ranks stop after a step, save, exit 75 (srun reports it), long before KillWait;
#     every rank is gone, none left waiting; pipetrain-ckpt verifies the checkpoint.
#  3. scancel of an sbatch job whose script runs srun: the same checkpoint, every rank gone.
#  4. SIGUSR2 to srun (which forwards it; pipetrain stops on it as on SIGTERM): exit 75, a
#     checkpoint, every rank gone.
#
#   slurm.sh <pipetrain-fashion> <pipetrain-ckpt> [data dir]
# Needs root (slurmd), Slurm (slurmctld slurmd slurm-client), munge, Fashion-MNIST and python3;
# exits 77 (skip) without them.
set -uo pipefail
exe=$1
ckpt_tool=$2
data=${3:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
slurm_local=$(cd "$here/../../scripts" && pwd)/slurm-local.sh
[ "$(id -u)" = 0 ] || { echo "needs root (slurmd starts the jobs)"; exit 77; }
for c in slurmctld slurmd srun sbatch scancel squeue munged python3; do
  command -v $c >/dev/null || { echo "$c not found (scripts/install-deps.sh installs Slurm and munge)"; exit 77; }
done
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
tmp=$(mktemp -d)
cluster=$tmp/cluster
# On any exit: the cluster and every process it started (slurm-local.sh stop), then the folder.
trap 'bash "$slurm_local" stop "$cluster" >/dev/null; rm -rf "$tmp"' EXIT
bash "$slurm_local" start "$cluster" || { echo "FAIL: the local Slurm cluster did not start"; exit 1; }
export SLURM_CONF=$cluster/slurm.conf PIPETRAIN_SLURM_LOCAL=$cluster
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fails=0
fail() { echo "FAIL: $*"; echo "$out" | tail -30; fails=$((fails+1)); }
source "$here/mpi_runs.sh"  # same_all, wait_for, all_gone, metrics_at_step (fail: redefined above)
fail() { echo "FAIL: $*"; echo "$out" | tail -30; fails=$((fails+1)); }
# -O (--overcommit): 4 tasks on this machine's CPUs, whatever their number.
common=(--data "$data" --batch 32 --threads 1 --seed 5 --timeout 20)
job() {  # job NP args...: one srun job in the foreground (sets out, rc)
  local np=$1; shift
  out=$(timeout 120 srun -n "$np" -O --mpi=pmix "$exe" "${common[@]}" "$@" 2>&1); rc=$?
}
losses() {  # losses FILE FROM: "step loss" of each metrics line from step FROM on
  python3 -c 'import json, sys
for line in open(sys.argv[1]):
    m = json.loads(line)
    if "loss" in m and m.get("step", 0) >= int(sys.argv[2]): print(m["step"], m["loss"])' "$1" "$2"
}
# The pids of this cluster's pipetrain ranks (the environment srun gives them names the cluster).
rank_pids() {
  local p
  for p in $(pgrep -f "^$exe "); do
    tr '\0' '\n' < /proc/$p/environ 2>/dev/null | grep -qxF "PIPETRAIN_SLURM_LOCAL=$cluster" && echo "$p"
  done
}
no_ranks() { [ -z "$(rank_pids)" ]; }

# ---- 1. srun -n 4 saves; srun -n 2 (another layout) resumes to the same trajectory -------------
job 4 --stages 2 --dp 2 --steps 20 --save "$tmp/ref" --metrics "$tmp/ref.jsonl"
[ $rc -eq 0 ] && echo "ok: srun -n 4 --mpi=pmix, 2 stages x 2 replicas, 20 steps" || fail "srun -n 4, 20 steps: rc=$rc"
job 4 --stages 2 --dp 2 --steps 10 --save "$tmp/half"
[ $rc -eq 0 ] || fail "srun -n 4, 10 steps: rc=$rc"
job 2 --stages 2 --microbatches 2 --steps 20 --resume "$tmp/half" --save "$tmp/resumed" --metrics "$tmp/resumed.jsonl"
if [ $rc -eq 0 ]; then
  echo "ok: a second job, srun -n 2 --stages 2 --microbatches 2, resumed the 4-process checkpoint"
  same_all "$tmp/ref" "$tmp/resumed"
  if [ -n "$(losses "$tmp/ref.jsonl" 11)" ] && [ "$(losses "$tmp/ref.jsonl" 11)" = "$(losses "$tmp/resumed.jsonl" 11)" ]; then
    echo "ok: steps 11-20 have the same loss in both jobs"
  else
    fail "the losses after the resume differ: $(diff <(losses "$tmp/ref.jsonl" 11) <(losses "$tmp/resumed.jsonl" 11) | head -4)"
  fi
else
  fail "resuming under srun -n 2: rc=$rc"
fi

# check_stopped NAME RC SECS: a checkpoint before the end that verifies, every rank gone.
check_stopped() {
  local name=$1 rc=$2 secs=$3 at
  wait_for 10 no_ranks || fail "$name: ranks $(rank_pids | tr '\n' ' ')still run 10 s after the job ended"
  at=$(sed -n 's/.*"step": "\([0-9]*\)".*/\1/p' "$tmp/$name/manifest.json" 2>/dev/null)
  if [ -n "$at" ] && "$ckpt_tool" verify "$tmp/$name" > "$tmp/$name.verify" 2>&1; then
    echo "ok ($secs s): $name: stopped -> rc=$rc, checkpoint at step $at verified, every rank gone"
  else
    fail "$name: stopped: rc=$rc after $secs s, checkpoint step '$at': $(cat "$tmp/$name.verify" 2>/dev/null)"
  fi
}

# ---- 2. scancel of a running srun job ---------------------------------------------------------
(exec timeout 120 srun -J pt-scancel -n 4 -O --mpi=pmix "$exe" "${common[@]}" --stages 2 --dp 2 \
  --steps 100000 --save "$tmp/cancelled" --metrics "$tmp/cancelled.jsonl" > "$tmp/cancelled.txt" 2>&1) &
srun_pid=$!
if wait_for 120 metrics_at_step "$tmp/cancelled.jsonl" 4; then
  id=$(squeue -h -n pt-scancel -o %i)
  t0=$SECONDS
  scancel "$id"
  wait $srun_pid; rc=$?
  secs=$((SECONDS - t0))
  out=$(grep -av "^train" "$tmp/cancelled.txt")
  # 75 from every task, well within KillWait (30 s): they stopped themselves, nobody was killed.
  if [ $rc -eq 75 ] && [ $secs -lt 20 ] && grep -q "tasks 0-3: Exited with exit code 75" <<<"$out"; then
    echo "ok ($secs s): srun job $id: scancel -> SIGTERM, every task exited 75"
  else
    fail "srun job $id: scancel: rc=$rc after $secs s, expected 75 from tasks 0-3 within 20 s"
  fi
  check_stopped cancelled $rc $secs
else
  out=$(tail -c 3000 "$tmp/cancelled.txt"); fail "the srun job never reached step 4"
fi

# ---- 3. scancel of an sbatch job (the script runs srun) ---------------------------------------
cat > "$tmp/job.sh" <<EOF
#!/bin/bash
srun --mpi=pmix $exe ${common[*]} --stages 2 --dp 2 --steps 100000 --save $tmp/batch --metrics $tmp/batch.jsonl
EOF
id=$(sbatch --parsable -n 4 -O -o "$tmp/batch.txt" "$tmp/job.sh")
if [ -n "$id" ] && wait_for 120 metrics_at_step "$tmp/batch.jsonl" 4; then
  t0=$SECONDS
  scancel "$id"
  gone() { [ -z "$(squeue -h -j "$id" 2>/dev/null)" ]; }
  wait_for 40 gone || fail "sbatch job $id still queued 40 s after scancel"
  out=$(grep -av "^train" "$tmp/batch.txt")
  check_stopped batch "(batch job)" $((SECONDS - t0))
else
  out=$(tail -c 3000 "$tmp/batch.txt" 2>/dev/null); fail "the sbatch job (id '$id') never reached step 4"
fi

# ---- 4. SIGUSR2 to srun itself: forwarded to every task, a stop like SIGTERM ---------------
# (SIGTERM to srun would not do: srun then kills the step at once; docs/slurm.md.)
(exec timeout 120 srun -n 2 -O --mpi=pmix "$exe" "${common[@]}" --stages 2 --steps 100000 \
  --save "$tmp/usr2" --metrics "$tmp/usr2.jsonl" > "$tmp/usr2.txt" 2>&1) &
srun_pid=$!
if wait_for 120 metrics_at_step "$tmp/usr2.jsonl" 4; then
  t0=$SECONDS
  kill -USR2 "$(pgrep -P $srun_pid -x srun)"  # srun, the child of `timeout`
  wait $srun_pid; rc=$?
  out=$(grep -av "^train" "$tmp/usr2.txt")
  [ $rc -eq 75 ] && echo "ok: SIGUSR2 to srun -> every task exited 75" || fail "SIGUSR2 to srun: rc=$rc, expected 75"
  check_stopped usr2 $rc $((SECONDS - t0))
else
  out=$(tail -c 3000 "$tmp/usr2.txt"); fail "the srun job for SIGUSR2 never reached step 4"
fi

[ $fails -eq 0 ] && echo "all Slurm cases passed" || { echo "$fails case(s) failed"; exit 1; }
