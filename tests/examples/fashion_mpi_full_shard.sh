#!/usr/bin/env bash
# --shard full (ZeRO-3 / FSDP) under mpirun (one process per device): a fully sharded run's
# checkpoint (weights and optimizer state, gathered from the parts) is bit-identical to plain
# data parallelism's with the same --dp/--stages (SGD+momentum with clipping over 2 replicas;
# AdamW over 2 stages x 2 replicas, units kept whole through the step (the default with stages);
# with prefetch; units of 2 layers and those dropped after forward: tests/full_shard); a run
# saved at step 2 and resumed (sharded, or plain in another layout) ends as the uninterrupted
# one; the run summary's memory line shows half the parameters, gradients and optimizer state
# held and a lower device peak; a rank killed with -9 leaves no survivor waiting (it gives up within --timeout naming the rank); and
# --shard full without --dp >= 2 is refused before anything runs. --shard-group 2 with 4 replicas
# (hybrid sharding) matches plain data parallelism within 1e-6 (SGD: MPI may add 4 replicas in
# another order for the reduce-scatter than for the all-reduce; with AdamW its first steps,
# ~lr * sign(g), turn such ulps into 1e-5, as --shard-optimizer's do).
#
#   fashion_mpi_full_shard.sh <pipetrain-fashion> [data dir]
# Needs the Fashion-MNIST files (Debian's dataset-fashion-mnist); exits 77 (skip) without them.
set -uo pipefail
exe=$1
data=${2:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
compare="python3 $here/compare_checkpoints.py"
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
work=$(mktemp -d)
trap 'pkill -9 -f "$work" 2>/dev/null; rm -rf "$work"' EXIT
source "$here/mpi_runs.sh"  # mpi_bg, rank_pid, wait_for, all_gone, metrics_at_step
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
common=(--data "$data" --batch 32 --seed 7 --threads 1)
mpi() {  # mpi NAME NP args...: output in $work/NAME.txt
  local name=$1 np=$2; shift 2
  if ! timeout 300 mpirun -np "$np" --oversubscribe "$exe" "${common[@]}" --timeout 30 "$@" \
       > "$work/$name.txt" 2>&1; then
    fail "mpirun -np $np $* exited with $?:"; tail -20 "$work/$name.txt"; return 1
  fi
  echo "ok: mpirun -np $np $*"
}
same() {  # same A B [tolerance]: checkpoints equal (bit for bit without a tolerance)
  local tol=()
  [ $# -ge 3 ] && tol=(--tolerance "$3")
  if $compare "${tol[@]}" "$work/$1" "$work/$2" >/dev/null; then
    echo "ok: $1 == $2 (${3:-bit for bit})"
  else
    fail "$1 != $2"; $compare "${tol[@]}" "$work/$1" "$work/$2" | tail -5
  fi
}

# 1. SGD+momentum with clipping, 2 replicas: fully sharded == plain; half held; a lower peak.
mpi plain 2 --dp 2 --steps 4 --clip 0.05 --save "$work/plain"
mpi full 2 --dp 2 --steps 4 --clip 0.05 --save "$work/full" --shard full
same plain full
mpi prefetch 2 --dp 2 --steps 4 --clip 0.05 --save "$work/prefetch" --shard full --shard-prefetch true
same plain prefetch
python3 - "$work/plain.txt" "$work/full.txt" <<'PY' || fail "the memory lines do not show the shards"
import re, sys
def line(path):
    text = open(path).read()
    m = re.search(r"memory held between steps \(this process\): parameters ([0-9.]+) MiB, gradients "
                  r"([0-9.]+) MiB, optimizer state ([0-9.]+) MiB(; gathered during the step: at most "
                  r"([0-9.]+) MiB)?; device peak in the last step: ([0-9.]+) MiB", text)
    print("  ", m.group(0))
    return [float(x) if x else 0.0 for x in m.groups()[:3] + m.groups()[4:]]
p, f = line(sys.argv[1]), line(sys.argv[2])
held_p, held_f = sum(p[:3]), sum(f[:3])
ok = abs(held_f - held_p / 2) <= 0.01 * held_p and f[3] > 0 and p[3] == 0 and f[4] < p[4]
sys.exit(0 if ok else 1)
PY

# 2. AdamW over 2 stages x 2 replicas (4 processes): == plain, whatever the units.
mpi plain_s2 4 --stages 2 --dp 2 --microbatches 2 --steps 4 --optim adamw --save "$work/plain_s2"
mpi full_s2 4 --stages 2 --dp 2 --microbatches 2 --steps 4 --optim adamw --save "$work/full_s2" --shard full
same plain_s2 full_s2
grep -q "kept whole through the step" "$work/full_s2.txt" \
  && echo "ok: with stages, units are kept whole through the step by default (auto)" \
  || fail "--reshard-after-forward auto did not keep the units with --stages 2"

# 3. 4 replicas: MPI's own order of adding them (see the top).
mpi plain_d4 4 --dp 4 --steps 4 --save "$work/plain_d4"
# (Full sharding over all 4 replicas: in one process, tests/full_shard.)
# Hybrid: parts cut across groups of 2 replicas, all-reduced across the 2 groups.
mpi hybrid_d4 4 --dp 4 --steps 4 --save "$work/hybrid_d4" --shard full --shard-group 2
same plain_d4 hybrid_d4 1e-6
grep -q "fully sharded in groups of 2, replicated across 2" "$work/hybrid_d4.txt" \
  && echo "ok: the start-up line names the groups" || fail "no hybrid sharding in the start-up line"

# 4. Saved at step 2 and resumed: sharded == uninterrupted; plain in another layout close to it.
mpi half 4 --stages 2 --dp 2 --microbatches 2 --steps 2 --optim adamw --save "$work/half" --shard full
mpi resumed 4 --stages 2 --dp 2 --microbatches 2 --steps 4 --optim adamw --resume "$work/half" \
  --save "$work/resumed" --shard full
same full_s2 resumed
mpi resumed_plain 2 --dp 2 --microbatches 2 --steps 4 --optim adamw --resume "$work/half" \
  --save "$work/resumed_plain"
same full_s2 resumed_plain 1e-6

# 5. kill -9 of one rank in the middle of the gathers, mpirun's own abort off: the survivor gives
# up within --timeout, naming the lost rank, instead of waiting in an all-gather forever.
mpi_bg "$work/kill.txt" 2 --mca orte_abort_on_non_zero_status 0 "$exe" "${common[@]}" --steps 100000 \
  --dp 2 --shard full --timeout 5 --log-every 1 --metrics "$work/m.jsonl"
if wait_for 60 metrics_at_step "$work/m.jsonl" 2; then
  t0=$(date +%s.%N)
  kill -9 "$(rank_pid $mpirun_pid 1)"
  others=$(pgrep -P $mpirun_pid | tr '\n' ' ')
  wait $mpirun_pid
  wait_for 30 all_gone $others || fail "processes $others still run 30 s after the kill"
  t1=$(date +%s.%N)
  secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")
  line=$(grep -oE "error: rank 0: .*world ranks? ([0-9]+, )*1([^0-9].*|$)" "$work/kill.txt" | head -1)
  [ -n "$line" ] || { fail "the survivor did not name world rank 1"; tail -20 "$work/kill.txt"; }
  python3 -c "import sys; sys.exit(0 if $t1 - $t0 <= 5 + 5 else 1)" || fail "the survivor took $secs s (--timeout 5)"
  echo "measured: kill -9 of rank 1 -> the survivor gave up after $secs s (--timeout 5): ${line:0:160}..."
else
  fail "the run to be killed never reached step 2"; tail -20 "$work/kill.txt"; kill -9 $mpirun_pid
fi

# 6. Refused before anything runs.
out=$("$exe" "${common[@]}" --steps 1 --shard full 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF -- "--shard full needs --dp R >= 2" <<<"$out"; then
  echo "ok: refused: $(grep -F -- "--shard full" <<<"$out" | head -1)"
else
  fail "--shard full without --dp was not refused (rc=$rc): $out"
fi

[ $fails -eq 0 ] && echo "all full-sharding checks passed" || echo "$fails check(s) failed"
exit $((fails > 0))
