#!/usr/bin/env bash
# pipetrain-fashion --update async (PipeDream-2BW):
#  - bad combinations are refused before training, naming the flag and the fix;
#  - a run trains (finite, falling loss) and says how much the second weight version costs;
#  - a checkpoint at a window end resumes to the same final parameters as the uninterrupted run
#    (weights, optimizer state and weight stash compared bit for bit);
#  - under mpirun -np 2 (one process per stage) the final parameters equal the single-process run;
#  - --dp 2 (one process, and mpirun -np 4): resume and the multi-process run bit for bit;
#  - --async-delay per-stage (the last stage keeps no second version): resume, mpirun -np 2 ==
#    one process, and its checkpoint is refused by a uniform-delay resume;
#  - the defaults (--async-delay per-microbatch, --async-momentum lookahead) are said at start-up
#    and are what they say: bit for bit the run with both given explicitly, not the plain one;
#    windows cut at checkpoints train the same bits, and mpirun -np 2 == one process.
# The uniform runs (2BW's delay) give --async-delay uniform: per-microbatch is the default.
#
#   fashion_async.sh <pipetrain-fashion> [data dir]
# Needs the Fashion-MNIST files; exits 77 (skip) without them.
set -uo pipefail
exe=$1
data=${2:-/usr/share/datasets/fashion-mnist}
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
here=$(dirname "$0")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
source "$here/expect.sh"  # expect_error, expect_refused

common=(--data "$data" --stages 2 --devices cpu:0,cpu:1 --threads 1 --batch 32 --microbatches 4 --no-shuffle --update async)

expect_refused "--update fast is not a mode: use --update sync or --update async" --update fast --steps 1
expect_refused "--schedule gpipe is not supported: use --schedule 1f1b" "${common[@]}" --schedule gpipe --steps 1
expect_refused "--schedule zb-h1 is not supported" "${common[@]}" --schedule zb-h1 --steps 1
expect_refused "--update async needs --stages >= 2" --data "$data" --update async --steps 1
expect_refused "needs --microbatches >= 3 (stages - 1)" --data "$data" --stages 4 --devices cpu:0..3 --microbatches 2 --update async --steps 1
expect_refused "pass --clip 0 or --update sync" "${common[@]}" --clip 1 --steps 1
dp2=(--data "$data" --stages 2 --dp 2 --devices cpu:0..3 --threads 1 --batch 32 --microbatches 4 --no-shuffle --update async)
expect_refused "--shard-optimizer with --update async" "${dp2[@]}" --shard-optimizer --steps 1
expect_refused "--ps with --update async" "${common[@]}" --ps 1 --steps 1
expect_refused "--async-window 0 must be an integer between 1 and" "${common[@]}" --async-window 0 --steps 1
expect_refused "--async-window 4 applies to --update async only" --data "$data" --stages 2 --devices cpu:0,cpu:1 --async-window 4 --steps 1
expect_refused "--parity-check compares with synchronous" "${common[@]}" --parity-check --steps 1
expect_refused "--async-delay per-stage applies to --update async only" --data "$data" --stages 2 --devices cpu:0,cpu:1 --async-delay per-stage --steps 1
expect_refused "--async-delay last is not a delay: use per-microbatch" "${common[@]}" --async-delay last --steps 1
expect_refused "--async-momentum heavy is not a form: use lookahead" "${common[@]}" --async-momentum heavy --steps 1
expect_refused "--async-momentum plain applies to --update async only" --data "$data" --stages 2 --devices cpu:0,cpu:1 --async-momentum plain --steps 1

check_run() {  # check_run NAME "must say" args...
  local name=$1 want=$2; shift 2
  local out rc
  out=$("$@" 2>&1); rc=$?
  if [ $rc -ne 0 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: $name: rc=$rc, expected '$want'. Output:"; echo "$out" | tail -20; fails=$((fails+1))
  else
    echo "ok: $name -> $(grep -F -- "$want" <<<"$out" | head -1)"
  fi
}
compare() {  # compare NAME A B
  if python3 "$here/compare_checkpoints.py" "$2" "$3" >"$work/cmp.txt" 2>&1; then
    echo "ok: $1: $(tail -1 "$work/cmp.txt")"
  else
    echo "FAIL: $1"; cat "$work/cmp.txt"; fails=$((fails+1))
  fi
}
differ() {  # differ NAME A B: the same parameter names, other values
  python3 "$here/compare_checkpoints.py" "$2" "$3" --weights-only >"$work/cmp.txt" 2>&1
  if grep -q "tensors differ" "$work/cmp.txt"; then
    echo "ok: $1: $(tail -1 "$work/cmp.txt" | sed 's/^FAIL: //')"
  else
    echo "FAIL: $1:"; cat "$work/cmp.txt"; fails=$((fails+1))
  fi
}

# 12 steps in windows of 4: the whole run, and 8 steps + resume (a checkpoint at a window end).
uniform=(--async-delay uniform)
check_run "async run" "second weight version" "$exe" "${common[@]}" "${uniform[@]}" --async-window 4 --steps 12 --save "$work/whole"
check_run "plain heavy-ball momentum under a delay gets a note" "--nesterov (with --update async: --async-momentum lookahead, the default) compensates" "$exe" "${common[@]}" --async-momentum plain --steps 2
out=$("$exe" "${common[@]}" --steps 2 2>&1)
if grep -q "^note: delayed updates" <<<"$out"; then echo "FAIL: the default (lookahead) still gets the note"; fails=$((fails+1)); else echo "ok: no note with the default momentum"; fi
check_run "async says what it changes" "PipeDream-2BW's exact update: --async-delay uniform --async-momentum plain" "$exe" "${common[@]}" --steps 2
check_run "async says the look-ahead form" "nesterov=true" "$exe" "${common[@]}" --steps 2
check_run "async first 8 steps" "saved checkpoint" "$exe" "${common[@]}" "${uniform[@]}" --async-window 4 --steps 8 --save "$work/part"
check_run "async resume to 12" "resumed from" "$exe" "${common[@]}" "${uniform[@]}" --async-window 4 --steps 12 --resume "$work/part" --save "$work/resumed"
compare "resume at a window end == uninterrupted" "$work/whole" "$work/resumed"
# --save-every 6 cuts the windows at step 6 (4 + 2 + 4 + 2): the windows change, the result not.
check_run "async --save-every 6" "saved checkpoint" "$exe" "${common[@]}" "${uniform[@]}" --async-window 4 --steps 12 --save "$work/every" --save-every 6
compare "windows cut at checkpoints == uninterrupted" "$work/whole" "$work/every/step-00000012"
# The stash is in the checkpoint, and a synchronous run's checkpoint is not resumed as async.
grep -q '"stash\.' "$work/whole/manifest.json" || { echo "FAIL: no stash.* tensors in the checkpoint"; fails=$((fails+1)); }
"$exe" --data "$data" --stages 2 --devices cpu:0,cpu:1 --threads 1 --batch 32 --microbatches 4 --no-shuffle --steps 2 --save "$work/sync" >/dev/null 2>&1
expect_error "resume it with --update sync" "${common[@]}" --steps 4 --resume "$work/sync"

# --dp 2: each stage's UPDATE all-reduces its gradient with the other replica's. A checkpoint
# (replica 0's weights, optimizer state and stash) resumes bit for bit.
check_run "async --dp 2" "2 data-parallel replicas" "$exe" "${dp2[@]}" "${uniform[@]}" --async-window 4 --steps 12 --save "$work/dp"
check_run "async --dp 2 first 8 steps" "saved checkpoint" "$exe" "${dp2[@]}" "${uniform[@]}" --async-window 4 --steps 8 --save "$work/dp_part"
check_run "async --dp 2 resume to 12" "resumed from" "$exe" "${dp2[@]}" "${uniform[@]}" --async-window 4 --steps 12 --resume "$work/dp_part" --save "$work/dp_resumed"
compare "--dp 2 resume at a window end == uninterrupted" "$work/dp" "$work/dp_resumed"

# --async-delay per-stage: the same checks, and the last stage's missing stash is named on a
# uniform resume.
check_run "async per-stage run" "delay per-stage" "$exe" "${common[@]}" --async-delay per-stage --async-window 4 --steps 12 --save "$work/ps_whole"
check_run "async per-stage first 8 steps" "saved checkpoint" "$exe" "${common[@]}" --async-delay per-stage --async-window 4 --steps 8 --save "$work/ps_part"
check_run "async per-stage resume to 12" "resumed from" "$exe" "${common[@]}" --async-delay per-stage --async-window 4 --steps 12 --resume "$work/ps_part" --save "$work/ps_resumed"
compare "per-stage resume at a window end == uninterrupted" "$work/ps_whole" "$work/ps_resumed"
# Other values than uniform's; and the last stage (layers 3..) has no stash.
differ "per-stage and uniform delays train differently" "$work/whole" "$work/ps_whole"
stashes() { grep -oE '"stash\.[0-9]+' "$1/manifest.json" | sort -u | tr '\n' ' '; }
echo "stash layers: uniform $(stashes "$work/whole"), per-stage $(stashes "$work/ps_whole")"
[ "$(stashes "$work/ps_whole")" != "$(stashes "$work/whole")" ] && [ -n "$(stashes "$work/ps_whole")" ] ||
  { echo "FAIL: a per-stage checkpoint should hold the first stage's stash only"; fails=$((fails+1)); }
expect_error "the --async-delay it was written with" "${common[@]}" "${uniform[@]}" --steps 12 --resume "$work/ps_part"
# The defaults are what the start-up line says: the same bits as both given explicitly (the
# look-ahead form is --nesterov), and not those of the plain optimizer.
check_run "async defaults" "saved checkpoint" "$exe" "${common[@]}" --async-window 4 --steps 12 --save "$work/defaults"
check_run "async per-microbatch + --nesterov" "saved checkpoint" "$exe" "${common[@]}" --async-delay per-microbatch --nesterov --async-window 4 --steps 12 --save "$work/explicit"
compare "the async defaults == --async-delay per-microbatch --nesterov" "$work/defaults" "$work/explicit"
check_run "async defaults, --save-every 6" "saved checkpoint" "$exe" "${common[@]}" --async-window 4 --steps 12 --save "$work/defaults_every" --save-every 6
compare "the defaults with windows cut at checkpoints == uninterrupted" "$work/defaults" "$work/defaults_every/step-00000012"
differ "per-microbatch and per-stage delays train differently" "$work/defaults" "$work/ps_whole"
check_run "async --async-momentum plain" "saved checkpoint" "$exe" "${common[@]}" --async-momentum plain --async-window 4 --steps 12 --save "$work/plain"
differ "the look-ahead default trains differently from --async-momentum plain" "$work/defaults" "$work/plain"

if command -v mpirun >/dev/null; then
  out=$(timeout 300 mpirun -np 2 --oversubscribe --bind-to none "$exe" --data "$data" --stages 2 --threads 1 --batch 32 \
        --microbatches 4 --no-shuffle --update async --async-delay per-stage --async-window 4 --steps 12 --save "$work/mpi_ps" 2>&1); rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: mpirun -np 2 async per-stage: rc=$rc"; echo "$out" | tail -20; fails=$((fails+1)); fi
  compare "mpirun -np 2 async per-stage == one process" "$work/ps_whole" "$work/mpi_ps"
  out=$(timeout 300 mpirun -np 2 --oversubscribe --bind-to none "$exe" --data "$data" --stages 2 --threads 1 --batch 32 \
        --microbatches 4 --no-shuffle --update async --async-window 4 --steps 12 --save "$work/mpi_defaults" 2>&1); rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: mpirun -np 2 async defaults: rc=$rc"; echo "$out" | tail -20; fails=$((fails+1)); fi
  compare "mpirun -np 2 async defaults == one process" "$work/defaults" "$work/mpi_defaults"
  out=$(timeout 300 mpirun -np 2 --oversubscribe --bind-to none "$exe" --data "$data" --stages 2 --threads 1 --batch 32 \
        --microbatches 4 --no-shuffle --update async --async-delay uniform --async-window 4 --steps 12 --save "$work/mpi" 2>&1); rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: mpirun -np 2 async: rc=$rc"; echo "$out" | tail -20; fails=$((fails+1)); fi
  compare "mpirun -np 2 async == one process" "$work/whole" "$work/mpi"
  # world rank = replica * 2 + stage
  out=$(timeout 300 mpirun -np 4 --oversubscribe --bind-to none "$exe" --data "$data" --stages 2 --dp 2 --threads 1 \
        --batch 32 --microbatches 4 --no-shuffle --update async --async-delay uniform --async-window 4 --steps 12 --save "$work/mpi_dp" 2>&1); rc=$?
  if [ $rc -ne 0 ]; then echo "FAIL: mpirun -np 4 async --dp 2: rc=$rc"; echo "$out" | tail -20; fails=$((fails+1)); fi
  compare "mpirun -np 4 --dp 2 async == one process --dp 2" "$work/dp" "$work/mpi_dp"
else
  echo "skipped: mpirun not found"
fi

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
