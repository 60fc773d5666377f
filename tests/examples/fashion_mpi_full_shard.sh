#!/usr/bin/env bash
# --shard full (ZeRO-3 / FSDP) under mpirun (one process per device): a fully sharded run's
# checkpoint (weights and optimizer state, gathered from the parts) is bit-identical to plain
# data parallelism's with the same --dp/--stages (SGD+momentum with clipping over 2 replicas;
# AdamW over 2 stages x 2 replicas, units of 1 and of 2 layers, kept whole after forward); with
# 4 replicas MPI may add the replicas in another order for the reduce-scatter than for the
# all-reduce (~1 ulp a step), so there within 1e-6 with SGD (AdamW's first steps, ~lr * sign(g),
# turn ulps of tiny gradients into 1e-5: --shard-optimizer differs from plain just as much); a run saved at step 2 and resumed (sharded,
# or plain in another layout) ends as the uninterrupted one; the run summary's memory line shows
# half the parameters, gradients and optimizer state held and a lower device peak; and
# --shard full without --dp >= 2 is refused before anything runs.
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
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
common=(--data "$data" --batch 32 --seed 7 --threads 1 --timeout 30)
mpi() {  # mpi NAME NP args...: output in $work/NAME.txt
  local name=$1 np=$2; shift 2
  if ! timeout 300 mpirun -np "$np" --oversubscribe "$exe" "${common[@]}" "$@" > "$work/$name.txt" 2>&1; then
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
mpi full_s2_kept 4 --stages 2 --dp 2 --microbatches 2 --steps 4 --optim adamw --save "$work/full_s2_kept" \
  --shard full --shard-unit 2 --reshard-after-forward false
same plain_s2 full_s2_kept

# 3. 4 replicas: MPI's own order of adding them (see the top).
mpi plain_d4 4 --dp 4 --steps 4 --save "$work/plain_d4"
mpi full_d4 4 --dp 4 --steps 4 --save "$work/full_d4" --shard full
same plain_d4 full_d4 1e-6

# 4. Saved at step 2 and resumed: sharded == uninterrupted; plain in another layout close to it.
mpi half 4 --stages 2 --dp 2 --microbatches 2 --steps 2 --optim adamw --save "$work/half" --shard full
mpi resumed 4 --stages 2 --dp 2 --microbatches 2 --steps 4 --optim adamw --resume "$work/half" \
  --save "$work/resumed" --shard full
same full_s2 resumed
mpi resumed_plain 2 --dp 2 --microbatches 2 --steps 4 --optim adamw --resume "$work/half" \
  --save "$work/resumed_plain"
same full_s2 resumed_plain 1e-6

# 5. Refused before anything runs.
out=$("$exe" "${common[@]}" --steps 1 --shard full 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF -- "--shard full needs --dp R >= 2" <<<"$out"; then
  echo "ok: refused: $(grep -F -- "--shard full" <<<"$out" | head -1)"
else
  fail "--shard full without --dp was not refused (rc=$rc): $out"
fi

[ $fails -eq 0 ] && echo "all full-sharding checks passed" || echo "$fails check(s) failed"
exit $((fails > 0))
