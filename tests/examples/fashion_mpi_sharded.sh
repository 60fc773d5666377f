#!/usr/bin/env bash
# --shard-optimizer under mpirun (one process per device): a sharded run's checkpoint (weights AND
# optimizer state, reassembled from the shards) is bit-identical to the unsharded run's with the
# same --dp/--stages (SGD+momentum with clipping, AdamW over 2 stages); a sharded run saved at
# step 2 and resumed (sharded or not) ends bit-identical to the uninterrupted one; --parity-check
# against single-device training still holds; the state per device is printed at ~1/R; and
# --shard-optimizer without --dp >= 2 is refused before anything runs.
#
#   fashion_mpi_sharded.sh <pipetrain-fashion> [data dir]
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
same() {  # same A B: checkpoints bit-identical, optimizer state included
  if $compare "$work/$1" "$work/$2"; then echo "ok: $1 == $2 (bit for bit)"; else fail "$1 != $2"; fi
}

# 1. SGD+momentum with clipping, 2 replicas: sharded == unsharded, and ~1/2 of the state.
mpi plain 2 --dp 2 --steps 4 --clip 0.05 --save "$work/plain"
mpi shard 2 --dp 2 --steps 4 --clip 0.05 --save "$work/shard" --shard-optimizer
same plain shard
line=$(grep -m1 "optimizer state:" "$work/shard.txt")
echo "   $line"
python3 - "$line" <<'PY' || fail "the optimizer state line does not show ~1/2: $line"
import re, sys
x, r, y = re.search(r"optimizer state: ([0-9.]+) MiB .*1/([0-9]+) of ([0-9.]+) MiB", sys.argv[1]).groups()
x, r, y = float(x), int(r), float(y)
sys.exit(0 if r == 2 and 0 < x < y and abs(x - y / r) <= 0.1 * y else 1)
PY

# 2. AdamW over 2 stages x 2 replicas (4 processes): sharded == unsharded.
mpi plain_s2 4 --stages 2 --dp 2 --steps 4 --optim adamw --save "$work/plain_s2"
mpi shard_s2 4 --stages 2 --dp 2 --steps 4 --optim adamw --save "$work/shard_s2" --shard-optimizer
same plain_s2 shard_s2

# 3. Save at step 2, resume to 4: sharded and unsharded resumptions equal the uninterrupted run.
mpi half 4 --stages 2 --dp 2 --steps 2 --optim adamw --save "$work/half" --shard-optimizer
mpi resumed 4 --stages 2 --dp 2 --steps 4 --optim adamw --resume "$work/half" --save "$work/resumed" --shard-optimizer
same shard_s2 resumed
mpi resumed_plain 2 --dp 2 --steps 4 --optim adamw --stages 1 --resume "$work/half" --save "$work/resumed_plain" \
  && $compare --tolerance 1e-6 "$work/shard_s2" "$work/resumed_plain" >/dev/null \
  && echo "ok: a sharded checkpoint resumes in another layout (--dp 2, 1 stage, unsharded)" \
  || fail "resuming the sharded checkpoint unsharded in another layout"

# 4. --parity-check against single-device training (bit-identical: R = 2, one micro-batch).
mpi parity 2 --dp 2 --steps 3 --parity-check --shard-optimizer \
  && { grep -qF "all 20 tensors are bit-identical" "$work/parity.txt" && echo "ok: parity check" \
       || { fail "parity check"; tail -5 "$work/parity.txt"; }; }

# 5. Refused before anything runs.
out=$("$exe" "${common[@]}" --steps 1 --shard-optimizer 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -qF -- "--shard-optimizer needs --dp R >= 2" <<<"$out"; then
  echo "ok: refused: $(grep -F -- "--shard-optimizer" <<<"$out" | head -1)"
else
  fail "--shard-optimizer without --dp was not refused (rc=$rc): $out"
fi

[ $fails -eq 0 ] && echo "all sharded-optimizer checks passed" || echo "$fails check(s) failed"
exit $((fails > 0))
