#!/usr/bin/env bash
# A stop signal (SIGTERM, as a batch scheduler sends before it kills a job) to one process of a
# parameter-server job, sent from outside while it trains (engine/parallel/parameter_server.h,
# "Stop signals"). Every case must end with exit code 75 (stopped early, resumable) and a
# checkpoint before the last step, never with a timeout:
#  1. synchronous (-np 3: 2 workers + 1 server), the signal to the server only: the server keeps
#     serving and relays the stop; resuming finishes bit-identical (weights and optimizer state)
#     to an uninterrupted run;
#  2. asynchronous (--staleness 1, worker 1 slowed 2x), the signal to the slow worker 1 only:
#     worker 0 never meets it per step and learns of it from the server's next reply; the workers
#     stop at different steps and the one behind catches up, so the checkpoint holds R x step
#     pushes (its optimizer's step count, checked); resuming trains to the end;
#  3. asynchronous with 2 stages (-np 5), the signal to replica 1's stage 1 (world rank 3): its
#     replica's stages agree, the servers tell replica 0; R x step pushes per stage again.
# Without the relay, (1) lost the server to the signal and (2) and (3) ended in a timeout with no
# checkpoint.
#
#   fashion_ps_preempt.sh <pipetrain-fashion> [data dir]
# Needs the Fashion-MNIST files and mpirun; exits 77 (skip) without them.
set -uo pipefail
exe=$1
data=${2:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
tmp=$(mktemp -d)
trap 'pkill -9 -f "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
fails=0
source "$here/mpi_runs.sh"  # fail, run, same_all, mpi_bg, rank_pid, wait_for, metrics_at_step
steps=60
timeout_s=20

# preempt NAME NP RANK args...: runs the job in the background, sends SIGTERM to world rank RANK
# once step 4 is done, and checks the ending: exit 75 within the timeout, a checkpoint in
# $tmp/NAME before the last step, no timeout error. Sets `at` to the checkpoint's step.
preempt() {
  local name=$1 np=$2 rank=$3; shift 3
  at=
  mpi_bg "$tmp/$name.txt" "$np" --bind-to none "$exe" --data "$data" --batch 32 --threads 1 \
    --steps $steps --timeout $timeout_s --save "$tmp/$name" --metrics "$tmp/$name.jsonl" "$@"
  if ! wait_for 120 metrics_at_step "$tmp/$name.jsonl" 4; then
    out=$(tail -c 3000 "$tmp/$name.txt")
    fail "$name: never reached step 4"
    kill -9 "$mpirun_pid" 2>/dev/null
    return
  fi
  local t0=$SECONDS
  kill -TERM "$(rank_pid "$mpirun_pid" "$rank")"
  wait "$mpirun_pid"
  local rc=$? secs=$((SECONDS - t0))
  at=$(sed -n 's/.*"step": "\([0-9]*\)".*/\1/p' "$tmp/$name/manifest.json" 2>/dev/null)
  out=$(tail -c 3000 "$tmp/$name.txt")
  if [ $rc -eq 75 ] && [ -n "$at" ] && [ "$at" -lt $steps ] && [ $secs -lt $timeout_s ] &&
    ! grep -q "timed out" "$tmp/$name.txt"; then
    echo "ok ($secs s): $name: SIGTERM to world rank $rank -> exit 75, checkpoint at step $at: $(grep -a -m1 -o "stopping after step.*" "$tmp/$name.txt")"
  else
    fail "$name: SIGTERM to world rank $rank: rc=$rc (expected 75) after $secs s (limit $timeout_s), checkpoint step '$at'"
  fi
}

# ---- 1. synchronous, the server signalled: resume == uninterrupted, bit for bit ----
run 3 --dp 2 --ps 1 --steps $steps --save "$tmp/sync_ref"
[ $rc -eq 0 ] || fail "the uninterrupted synchronous run failed"
preempt sync 3 2 --dp 2 --ps 1
grep -qF "stopped early on a stop signal" <<<"$out" || fail "sync: the server did not say it stopped early"
if [ -n "$at" ]; then
  run 3 --dp 2 --ps 1 --steps $steps --resume "$tmp/sync" --save "$tmp/sync"
  [ $rc -eq 0 ] || fail "sync: resuming from step $at failed"
  same_all "$tmp/sync_ref" "$tmp/sync"
fi

# R x step pushes: every worker trained the checkpoint's steps, none more.
pushes_match() {  # pushes_match NAME
  local pushes
  pushes=$(sed -n 's/.*"optimizer_steps": "\([0-9]*\)".*/\1/p' "$tmp/$1/manifest.json" 2>/dev/null)
  if [ -n "$at" ] && [ "$pushes" = $((2 * at)) ]; then
    echo "ok: $1: the servers applied $pushes pushes = 2 workers x step $at"
  else
    fail "$1: the checkpoint at step '$at' holds '$pushes' pushes (expected 2 x step)"
  fi
}

# ---- 2. asynchronous, the slow worker signalled; resume trains to the end ----
preempt async 3 1 --dp 2 --ps 1 --staleness 1 --slow-worker 1:2
pushes_match async
if [ -n "$at" ]; then
  run 3 --dp 2 --ps 1 --staleness 1 --steps $steps --resume "$tmp/async" --save "$tmp/async"
  end=$(sed -n 's/.*"step": "\([0-9]*\)".*/\1/p' "$tmp/async/manifest.json" 2>/dev/null)
  if [ $rc -eq 0 ] && [ "$end" = $steps ]; then
    echo "ok: async: resumed at step $at, trained to step $end"
  else
    fail "async: resuming from step $at: rc=$rc, final checkpoint at step '$end'"
  fi
fi

# ---- 3. asynchronous with 2 stages, replica 1's stage 1 signalled ----
preempt async_stages 5 3 --dp 2 --ps 1 --stages 2 --staleness 1
pushes_match async_stages

[ $fails -eq 0 ] && echo "all stop-signal cases passed" || { echo "$fails case(s) failed"; exit 1; }
