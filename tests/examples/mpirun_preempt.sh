#!/usr/bin/env bash
# Stopping an mpirun job from outside, exactly as docs/checkpoints.md ("Preemption") advises:
# `kill -USR2 <mpirun's pid>`. Open MPI 4.1's mpirun forwards SIGUSR2 to every rank at once and
# kills nothing; a SIGTERM it holds for odls_base_sigkill_timeout before passing it on, then
# kills (measured: with --mca odls_base_sigkill_timeout 30 the ranks trained on to their last
# step and mpirun ended 58 s after the signal, exit 1, no preemption checkpoint). Checks:
#  1. mpirun -np 4 --stages 2 --dp 2, SIGUSR2 to mpirun at step 4: exit 75 (mpirun passes the
#     ranks' code on) within 20 s, every rank gone, a checkpoint before the last step that
#     pipetrain-ckpt verifies, and resuming it finishes bit-identical to an uninterrupted run.
#  2. SIGUSR2 twice (mpirun's forward and a scheduler that signals every process, e.g. Slurm's
#     --signal=USR2@N): still one clean stop, exit 75.
# Before SIGUSR2 was a stop signal, its default action ended every rank at once: no checkpoint.
#
#   mpirun_preempt.sh <pipetrain-fashion> <pipetrain-ckpt> [data dir]
# Needs Fashion-MNIST, mpirun and python3; exits 77 (skip) without them.
set -uo pipefail
exe=$1
ckpt_tool=$2
data=${3:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
tmp=$(mktemp -d)
mpirun_pid=
# On any exit: the job started here (mpirun and its ranks, by pid), then the folder.
cleanup() {
  if [ -n "$mpirun_pid" ]; then
    kill -9 $(pgrep -P "$mpirun_pid") "$mpirun_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
fails=0
source "$here/mpi_runs.sh"  # fail, run, same_all, mpi_bg, wait_for, all_gone, metrics_at_step
steps=60
common=(--data "$data" --batch 32 --threads 1 --seed 3 --steps $steps --timeout 20 --stages 2 --dp 2)

# stop_with_usr2 NAME TIMES: the job in the background, SIGUSR2 to mpirun TIMES times at step 4
# (the second from outside to every rank, as a scheduler would), then the checks of (1).
stop_with_usr2() {
  local name=$1 times=$2
  mpi_bg "$tmp/$name.txt" 4 --bind-to none "$exe" "${common[@]}" --save "$tmp/$name" --metrics "$tmp/$name.jsonl"
  if ! wait_for 120 metrics_at_step "$tmp/$name.jsonl" 4; then
    out=$(tail -c 3000 "$tmp/$name.txt")
    fail "$name: never reached step 4"
    return
  fi
  local ranks t0 rc secs at
  ranks=$(pgrep -P "$mpirun_pid" | tr '\n' ' ')
  t0=$(date +%s.%N)
  kill -USR2 "$mpirun_pid"
  # shellcheck disable=SC2086  # a list of pids
  [ "$times" -gt 1 ] && kill -USR2 $ranks 2>/dev/null
  wait "$mpirun_pid"; rc=$?
  secs=$(python3 -c "import time; print(f'{time.time() - $t0:.1f}')")
  # shellcheck disable=SC2086
  wait_for 10 all_gone $ranks || fail "$name: ranks $ranks still run 10 s after mpirun ended"
  at=$(sed -n 's/.*"step": "\([0-9]*\)".*/\1/p' "$tmp/$name/manifest.json" 2>/dev/null)
  out=$(tail -c 3000 "$tmp/$name.txt")
  if [ $rc -eq 75 ] && [ -n "$at" ] && [ "$at" -lt $steps ] && python3 -c "import sys; sys.exit(0 if $secs < 20 else 1)"; then
    echo "ok ($secs s): $name: SIGUSR2 x$times to mpirun -> exit 75, every rank gone, checkpoint at step $at: $(grep -a -m1 -o "stopping after step.*" "$tmp/$name.txt")"
  else
    fail "$name: SIGUSR2 x$times to mpirun: rc=$rc (expected 75) after $secs s (limit 20), checkpoint step '$at'"
  fi
  if "$ckpt_tool" verify "$tmp/$name" > "$tmp/$name.verify" 2>&1; then
    echo "ok: $name: pipetrain-ckpt verify: $(tail -1 "$tmp/$name.verify")"
  else
    out=$(cat "$tmp/$name.verify"); fail "$name: the preemption checkpoint does not verify"
  fi
}

# ---- 1. one SIGUSR2; the checkpoint resumes to the uninterrupted run's weights -----------
out=$(timeout 120 mpirun -np 4 --oversubscribe --bind-to none "$exe" "${common[@]}" --save "$tmp/ref" 2>&1)
[ $? -eq 0 ] || fail "the uninterrupted reference run failed"
stop_with_usr2 once 1
mpirun_pid=
if [ -f "$tmp/once/manifest.json" ]; then
  out=$(timeout 120 mpirun -np 4 --oversubscribe --bind-to none "$exe" "${common[@]}" --resume "$tmp/once" --save "$tmp/once" 2>&1)
  [ $? -eq 0 ] || fail "resuming the preemption checkpoint failed"
  same_all "$tmp/ref" "$tmp/once"
fi

# ---- 2. SIGUSR2 to mpirun and to every rank: the repeat changes nothing -----------------
stop_with_usr2 twice 2
mpirun_pid=

[ $fails -eq 0 ] && echo "all mpirun stop cases passed" || { echo "$fails case(s) failed"; exit 1; }
