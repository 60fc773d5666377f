#!/usr/bin/env bash
# pipetrain-fashion with a parameter server (--ps K) under mpirun: world ranks [0, R) are the
# workers, [R, R + K) the servers.
#  - synchronous PS equals --dp R all-reduce training bit for bit (saved checkpoints compared
#    tensor by tensor): 1 server + 2 workers (-np 3), and 2 servers + 2 workers with clipping
#    (-np 4: the servers exchange per-tensor sums of squares for the global norm);
#  - asynchronous T = 1 with a straggler (--slow-worker 1:2) trains and reports an observed
#    staleness > 0 and within the bound T*R + R - 1 pushes;
#  - checkpoints hold the servers' optimizer state: sync PS saved at step 2 and resumed ==
#    uninterrupted (weights and optimizer state, bit for bit); a PS checkpoint resumed as --dp 2
#    all-reduce, and an all-reduce one resumed with --ps, equal the uninterrupted runs; async
#    saves every 2 steps and resumes from the latest;
#  - bad launches and flags are refused before anything runs, naming the fix;
#  - a worker killed (-9) mid-run: the server names it (world rank 1) and the job ends within
#    --timeout; a server killed (-9 from this script): the job ends naming world rank 2. No hang.
#
#   fashion_ps.sh <pipetrain-fashion> <pipetrain-fashion-faults> [data dir]
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
source "$here/mpi_runs.sh"  # fail, run, same, same_all, expect_fail

# ---- synchronous == all-reduce ----
run 0 --dp 2 --devices cpu:0..1 --steps 4 --save "$tmp/dp"
[ $rc -eq 0 ] || fail "--dp 2 reference failed"
run 3 --dp 2 --ps 1 --steps 4 --save "$tmp/ps1"
[ $rc -eq 0 ] && grep -qF "staleness max 0 pushes" <<<"$out" || fail "-np 3 --ps 1 failed"
same "$tmp/dp" "$tmp/ps1"
run 0 --dp 2 --devices cpu:0..1 --steps 4 --clip 0.5 --save "$tmp/dp_clip"
run 4 --dp 2 --ps 2 --steps 4 --clip 0.5 --save "$tmp/ps2_clip"
[ $rc -eq 0 ] && grep -qF "parameter server 1 (world rank 3) holds" <<<"$out" || fail "-np 4 --ps 2 failed"
same "$tmp/dp_clip" "$tmp/ps2_clip"

# ---- checkpoints: the servers' optimizer state saved and restored, any layout ----
run 3 --dp 2 --ps 1 --steps 2 --save "$tmp/ps_half"
[ $rc -eq 0 ] || fail "-np 3 --ps 1 --steps 2 --save failed"
run 3 --dp 2 --ps 1 --steps 4 --resume "$tmp/ps_half" --save "$tmp/ps_resumed"
[ $rc -eq 0 ] || fail "-np 3 --ps 1 --resume failed"
same_all "$tmp/ps1" "$tmp/ps_resumed"
run 0 --dp 2 --devices cpu:0..1 --steps 4 --resume "$tmp/ps_half" --save "$tmp/dp_from_ps"
[ $rc -eq 0 ] || fail "--dp 2 resumed from a --ps checkpoint failed"
same_all "$tmp/ps1" "$tmp/dp_from_ps"
run 0 --dp 2 --devices cpu:0..1 --steps 2 --save "$tmp/dp_half"
run 3 --dp 2 --ps 1 --steps 4 --resume "$tmp/dp_half" --save "$tmp/ps_from_dp"
[ $rc -eq 0 ] || fail "-np 3 --ps 1 resumed from a --dp checkpoint failed"
same_all "$tmp/dp" "$tmp/ps_from_dp"
# Asynchronous: numbered saves while training (the workers pause for each), resumed, trains on.
# With a straggler: the workers meet before each save, so step 2's checkpoint holds the servers'
# state after all 2 x 2 pushes (one optimizer step each).
run 3 --dp 2 --ps 1 --staleness 1 --slow-worker 1:2 --steps 4 --save "$tmp/async" --save-every 2
[ $rc -eq 0 ] && grep -qF '"optimizer_steps": "4"' "$tmp/async/step-00000002/manifest.json" &&
  grep -qF '"optimizer_steps": "8"' "$tmp/async/step-00000004/manifest.json" ||
  fail "async --save-every 2: rc=$rc, or a checkpoint misses pushes of its step"
run 3 --dp 2 --ps 1 --staleness 1 --steps 6 --resume "latest:$tmp/async" --save "$tmp/async_on"
# The servers' optimizer step count went on from the checkpoint's 8 (one per push, 2 per step).
[ $rc -eq 0 ] && grep -qF '"optimizer_steps": "12"' "$tmp/async_on/manifest.json" ||
  fail "async resume: rc=$rc, or the servers did not continue from the checkpoint's step count"

# ---- asynchronous, T = 1, one worker 2x slower ----
run 3 --dp 2 --ps 1 --staleness 1 --slow-worker 1:2 --steps 40
stale=$(grep -oE "staleness max [0-9]+ pushes" <<<"$out" | grep -oE "[0-9]+")
if [ $rc -ne 0 ] || [ -z "$stale" ] || [ "$stale" -lt 1 ] || [ "$stale" -gt 3 ]; then
  fail "async T=1: rc=$rc, observed max staleness '$stale' (want 1..3 pushes)"
else
  echo "ok: async T=1 with a straggler: $(grep -F "staleness max" <<<"$out")"
fi

# ---- refusals ----
expect_fail 60 "start mpirun -np 3" 2 --dp 2 --ps 1 --steps 1
expect_fail 60 "--staleness 1 needs --ps K" 0 --staleness 1 --steps 1
expect_fail 60 "--ps 0 must be an integer between 1 and 1024" 0 --ps 0 --steps 1
expect_fail 60 "--staleness -1 must be an integer between 0 and 1000000" 0 --ps 1 --staleness -1 --steps 1
expect_fail 60 "--slow-worker 'x' must be REPLICA:FACTOR" 0 --dp 2 --devices cpu:0..1 --slow-worker x --steps 1

# ---- a dead worker: the server names it, within --timeout ----
exe=$faults_exe
mpirun_flags="--mca orte_abort_on_non_zero_status 0" PIPETRAIN_FAULT=kill:1:2 \
  expect_fail 60 "waiting for worker 1's gradients" 3 --dp 2 --ps 1 --steps 20 --timeout 5
grep -qF "world rank 1" <<<"$out" || fail "the dead worker's world rank is not named"

# ---- a dead server (kill -9 from here): the job ends naming world rank 2 ----
exe=$1
t0=$SECONDS
timeout 120 mpirun --mca orte_abort_on_non_zero_status 0 -np 3 --oversubscribe --bind-to none \
  "$exe" --data "$data" --batch 32 --threads 1 --dp 2 --ps 1 --steps 100000 --timeout 5 \
  >"$tmp/server_kill.log" 2>&1 &
launcher=$!
server=""
for _ in $(seq 1 100); do  # the process of world rank 2 among the launcher's descendants
  sleep 0.2
  grep -qF "epoch 1 loss" "$tmp/server_kill.log" || continue  # training has begun
  for pid in $(pgrep -P "$launcher") $(for p in $(pgrep -P "$launcher"); do pgrep -P "$p"; done); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=2"; then
      server=$pid
    fi
  done
  [ -n "$server" ] && break
done
if [ -z "$server" ]; then
  out=$(cat "$tmp/server_kill.log"); fail "could not find the server process (world rank 2)"
  kill "$launcher" 2>/dev/null
else
  kill -9 "$server"
  wait "$launcher"; rc=$?
  secs=$((SECONDS - t0)); out=$(cat "$tmp/server_kill.log")
  # The first error may come from a worker that met another in a collective while that one waited
  # for the dead server; the waiting one has said which server it waits for by then.
  named=$(grep -E "(error|warning): .*world rank 2" <<<"$out" | head -1)
  if [ $rc -eq 0 ] || [ $secs -gt 60 ] || [ -z "$named" ]; then
    fail "server killed: rc=$rc after $secs s, expected an error or warning naming world rank 2"
  else
    echo "ok ($secs s): server killed -> $named"
  fi
fi

[ $fails -eq 0 ] && echo "all parameter-server cases passed" || { echo "$fails case(s) failed"; exit 1; }
