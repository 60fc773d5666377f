#!/usr/bin/env bash
# The flight recorder (--flight-recorder DIR) and pipetrain-hang, run as a user would:
#  - pipetrain-hang refuses a missing folder, an empty one, an empty argument and a file that is
#    not a record; pipetrain-fashion creates a --flight-recorder folder that does not exist (with
#    the folders above it) and refuses, before training, an empty one, a regular file or a FIFO;
#  - SIGUSR1 to a healthy, training process writes its record (with its actions) and training
#    goes on to the end (exit 0, test accuracy printed);
#  - with --mpi: SIGUSR1 to mpirun reaches every rank (Open MPI forwards it): two records, the
#    run finishes, pipetrain-hang sees no stall; and under mpirun -np 4 (--stages 2 --dp 2, one process per device) world rank 2
#    stalls at step 1 (PIPETRAIN_FAULT, the test-only build): the other ranks time out, all four
#    records are written (the stalled rank's by its watcher thread, on request), and
#    pipetrain-hang names rank 2 as the stalled one, says what ranks 0, 1 and 3 wait in, shows
#    rank 3 in [1RECV_F0] in the grid, and names rank 3's receive as the first unmatched one.
#
# Usage: flight_recorder.sh PIPETRAIN-FASHION PIPETRAIN-HANG [--mpi PIPETRAIN-FASHION-FAULTS] [DATA]
# Exit 77 (skip) without Fashion-MNIST (or mpirun with --mpi).
set -uo pipefail
fashion=$1
hang=$2
shift 2
faults=
if [ "${1:-}" = --mpi ]; then faults=$2; shift 2; fi
data=${1:-/usr/share/datasets/fashion-mnist}
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] ||
  { echo "no Fashion-MNIST in $data: skipped"; exit 77; }
if [ -n "$faults" ]; then command -v mpirun >/dev/null || { echo "mpirun not found: skipped"; exit 77; }; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
pass() { echo "ok: $*"; }
has() {  # has TEXT WANT: WANT (fixed string) in TEXT
  grep -qF -- "$2" <<<"$1"
}

if [ -z "$faults" ]; then
  # ---- refusals ----
  out=$("$hang" "$work/nowhere" 2>&1); rc=$?
  [ $rc -eq 2 ] && has "$out" "not a folder of flight records" && pass "pipetrain-hang on a missing folder: $out" ||
    fail "pipetrain-hang on a missing folder gave rc=$rc: $out"
  mkdir "$work/empty"
  out=$("$hang" "$work/empty" 2>&1); rc=$?
  [ $rc -eq 2 ] && has "$out" "holds no flight records" && pass "pipetrain-hang on an empty folder" ||
    fail "pipetrain-hang on an empty folder gave rc=$rc: $out"
  mkdir "$work/bad" && echo '{"format": "something else"}' >"$work/bad/rank-00000.json"
  out=$("$hang" "$work/bad" 2>&1); rc=$?
  [ $rc -eq 2 ] && has "$out" "rank-00000.json: not a pipetrain flight record" &&
    pass "pipetrain-hang on a file that is not a record" || fail "pipetrain-hang on a bad file gave rc=$rc: $out"
  out=$("$hang" "" 2>&1); rc=$?
  [ $rc -eq 2 ] && has "$out" "DIR: the value is empty" && pass "pipetrain-hang '': $out" ||
    fail "pipetrain-hang '' gave rc=$rc: $out"
  out=$(timeout 120 "$fashion" --data "$data" --steps 2 --batch 64 --flight-recorder "$work/new/fr" 2>&1); rc=$?
  [ $rc -eq 0 ] && [ -d "$work/new/fr" ] &&
    pass "pipetrain-fashion creates a missing --flight-recorder folder and the folders above it" ||
    fail "pipetrain-fashion --flight-recorder (missing folder) gave rc=$rc, folder: $(ls -d "$work/new/fr" 2>&1): $out"
  echo x >"$work/afile"
  mkfifo "$work/fifo"
  for bad in "|the value is empty" "$work/afile|--flight-recorder $work/afile: it is a regular file, not a folder" \
             "$work/fifo|--flight-recorder $work/fifo: it is a FIFO (named pipe), not a folder"; do
    out=$(timeout 120 "$fashion" --data "$data" --steps 100000 --flight-recorder "${bad%%|*}" 2>&1); rc=$?
    [ $rc -eq 2 ] && has "$out" "${bad#*|}" && ! grep -q 'train [0-9]' <<<"$out" &&
      pass "pipetrain-fashion --flight-recorder '${bad%%|*}' -> $out" ||
      fail "pipetrain-fashion --flight-recorder '${bad%%|*}' gave rc=$rc, expected 2 with '${bad#*|}': $out"
  done
  [ -p "$work/fifo" ] && grep -qx x "$work/afile" || fail "a refused --flight-recorder changed the FIFO or the file"

  # ---- SIGUSR1 to a healthy run: a record, and training goes on ----
  mkdir "$work/usr1"
  "$fashion" --data "$data" --batch 32 --stages 2 --steps 600 --log-every 20 \
    --flight-recorder "$work/usr1" >"$work/usr1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do grep -qE 'train .*[0-9]+/600' "$work/usr1.log" && break; sleep 0.1; done
  kill -USR1 $pid
  for _ in $(seq 1 100); do [ -f "$work/usr1/rank-00000.json" ] && break; sleep 0.1; done
  wait $pid; rc=$?
  if [ $rc -ne 0 ] || ! grep -qF "test accuracy" "$work/usr1.log"; then
    fail "after SIGUSR1 the run did not finish normally (rc=$rc):"; tail -5 "$work/usr1.log"
  elif [ ! -f "$work/usr1/rank-00000.json" ]; then
    fail "SIGUSR1 wrote no record"; ls -la "$work/usr1"
  elif ! grep -qF '"reason": "SIGUSR1"' "$work/usr1/rank-00000.json" ||
       ! grep -qF '"action": "0F0"' "$work/usr1/rank-00000.json"; then
    fail "the SIGUSR1 record lacks its reason or the actions:"; head -c 600 "$work/usr1/rank-00000.json"
  else
    out=$("$hang" "$work/usr1" 2>&1); rc=$?
    if [ $rc -eq 0 ] && has "$out" "flight records of 1 of 1 ranks" && has "$out" "rank 0, replica 0 device 1"; then
      pass "SIGUSR1: record written, training finished (rc 0); pipetrain-hang reads it"
    else
      fail "pipetrain-hang on the SIGUSR1 record gave rc=$rc:"; echo "$out"
    fi
  fi

  # ---- a rank that reached a collective only after its partner gave up ----
  # Records as a SIGSTOPped rank leaves them when mpirun's teardown resumes it (SIGCONT): rank 0
  # timed out in an all_gather of 'ps workers'; rank 1 entered that all_gather 3.5 s after rank 0
  # gave up, finished it, and wrote its record from inside the next one. Rank 1 is the stalled
  # rank; counting it as "there" left nobody to blame (tests/examples/fashion_ps_stopped_worker.sh
  # hit it at one moment of the stop).
  mkdir -p "$work/late"
  python3 - "$work/late" <<'PY'
import json, sys
t0 = 1_800_000_000_000_000  # microseconds since the epoch
def record(rank, written, events):
    return {"format": "pipetrain-flight-record", "version": 1, "world_rank": rank, "world_size": 2,
            "pid": 100 + rank, "reason": "asked by rank 0, which failed", "written_unix_us": written,
            "capacity": 64, "groups": [{"name": "ps workers", "world_ranks": [0, 1]}],
            "action_lists": [], "events": events}
def gather(seq, state, start, end, nbytes):
    return {"seq": seq, "kind": "collective", "state": state, "op": "all_gather", "group": 0,
            "bytes": nbytes, "run": 7, "step": 7, "start_unix_us": start, "end_unix_us": end}
rank0 = record(0, t0 + 4_600_000, [gather(0, "timed_out", t0, t0 + 4_500_000, 8)])
rank1 = record(1, t0 + 8_100_000, [gather(0, "finished", t0 + 8_000_000, t0 + 8_000_100, 8),
                                   gather(1, "started", t0 + 8_000_200, 0, 2624)])
for r in (rank0, rank1):
    with open(f"{sys.argv[1]}/rank-{r['world_rank']:05d}.json", "w") as f:
        json.dump(r, f)
PY
  out=$("$hang" "$work/late" 2>&1); rc=$?
  if has "$out" "stalled: rank 1 (waited for by rank 0)" && ! has "$out" "stalled: rank 0" &&
     has "$out" "after this rank gave up"; then
    pass "a rank that reached the collective after its partner gave up is the stalled one"
  else
    fail "pipetrain-hang on a late rank (rc=$rc) does not name rank 1 alone:"; echo "$out"
  fi
else
  # ---- SIGUSR1 to mpirun (it forwards it to every rank): all records, training goes on ----
  mkdir "$work/usr1"
  mpirun ${PIPETRAIN_MPIRUN_FLAGS:-} -np 2 --oversubscribe "$fashion" --data "$data" --batch 32 \
    --stages 2 --steps 400 --log-every 20 --flight-recorder "$work/usr1" >"$work/usr1.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do grep -qE 'train .*[0-9]+/400' "$work/usr1.log" && break; sleep 0.1; done
  kill -USR1 $pid
  for _ in $(seq 1 100); do [ -f "$work/usr1/rank-00001.json" ] && [ -f "$work/usr1/rank-00000.json" ] && break; sleep 0.1; done
  wait $pid; rc=$?
  report=$("$hang" "$work/usr1" 2>&1)
  if [ $rc -eq 0 ] && grep -qF "test accuracy" "$work/usr1.log" && has "$report" "flight records of 2 of 2 ranks" &&
     ! has "$report" "stalled:"; then
    pass "SIGUSR1 to mpirun: both ranks wrote a record, training finished, pipetrain-hang sees no stall"
  else
    fail "SIGUSR1 to mpirun (rc=$rc):"; tail -5 "$work/usr1.log"; echo "$report"
  fi

  # ---- a stalled rank under mpirun ----
  mkdir "$work/stall"
  t0=$SECONDS
  out=$(PIPETRAIN_FAULT=stall:2:1 timeout 120 mpirun ${PIPETRAIN_MPIRUN_FLAGS:-} -np 4 --oversubscribe "$faults" \
    --data "$data" --batch 32 --stages 2 --dp 2 --steps 4 --timeout 5 --flight-recorder "$work/stall" 2>&1); rc=$?
  secs=$((SECONDS - t0))
  [ $rc -ne 0 ] && [ $secs -le 60 ] && pass "the stalled job ended (rc=$rc) after $secs s" ||
    { fail "the stalled job gave rc=$rc after $secs s:"; echo "$out" | tail -20; }
  for r in 0 1 2 3; do
    [ -f "$work/stall/rank-0000$r.json" ] || fail "no flight record of rank $r"
  done
  report=$("$hang" "$work/stall" 2>&1); rc=$?
  echo "---- pipetrain-hang:"; echo "$report"; echo "----"
  [ $rc -eq 0 ] || fail "pipetrain-hang gave rc=$rc"
  for want in "flight records of 4 of 4 ranks" \
              "stalled: rank 2 (waited for by rank 0, rank 3) waits for nobody" \
              "rank 3 waits for rank 2: recv from rank 2" \
              "in action 1RECV_F0 of step 1" \
              "rank 0 waits for rank 2: all_reduce" \
              "rank 1 waits for rank 3: all_reduce" \
              "[1RECV_F0]" \
              "first unmatched send or receive (1 in all): rank 3's recv from rank 2" \
              "rank 2 never sent it"; do
    has "$report" "$want" && pass "pipetrain-hang says: $want" || fail "pipetrain-hang does not say '$want'"
  done
fi

[ $fails -eq 0 ] && echo "all flight recorder cases passed" || { echo "$fails case(s) failed"; exit 1; }
