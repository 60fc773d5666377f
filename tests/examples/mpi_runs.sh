# Sourced by the multi-process example tests (fashion_ps*.sh, fashion_mpi_checkpoints.sh): run
# "$exe" on "$data", with or without mpirun, and check how it ends or what it saved; or run a job
# in the background and signal or kill one of its ranks from outside. Each check prints "ok: ..."
# or "FAIL: ..." and counts failures in $fails. Set by the caller: exe, data, here; optional:
# mpirun_flags (extra mpirun options), run_extra (options added to every run).

fail() { echo "FAIL: $*"; echo "$out" | tail -30; fails=$((fails+1)); }

run() {  # run NP args... (sets out, rc, secs); NP 0: no mpirun
  local np=$1; shift
  local t0=$SECONDS
  # shellcheck disable=SC2086  # run_extra and mpirun_flags are lists of options
  if [ "$np" = 0 ]; then
    out=$(timeout 120 "$exe" --data "$data" --batch 32 --threads 1 ${run_extra:-} "$@" 2>&1); rc=$?
  else
    out=$(timeout 120 mpirun ${mpirun_flags:-} -np "$np" --oversubscribe --bind-to none "$exe" --data "$data" --batch 32 --threads 1 ${run_extra:-} "$@" 2>&1); rc=$?
  fi
  secs=$((SECONDS - t0))
}

same() {  # same A B: the checkpoints' weights are bit-identical
  if python3 "$here/compare_checkpoints.py" "$1" "$2" --weights-only --quiet; then
    echo "ok: $1 == $2 bit for bit"
  else
    fail "$1 and $2 differ"
  fi
}

same_all() {  # same_all A B: weights and optimizer state bit-identical
  if python3 "$here/compare_checkpoints.py" "$1" "$2" --quiet; then
    echo "ok: $1 == $2 bit for bit, optimizer state included"
  else
    fail "$1 and $2 differ"
  fi
}

expect_fail() {  # expect_fail MAX_SECONDS "must say" NP args...
  local max=$1 want=$2; shift 2
  run "$@"
  if [ $rc -eq 0 ] || [ $secs -gt "$max" ] || ! grep -qF -- "$want" <<<"$out"; then
    fail "-np $* gave rc=$rc after $secs s (limit $max), expected a failure saying '$want'"
  else
    echo "ok ($secs s): -np $* -> rc=$rc, $(grep -F -- "$want" <<<"$out" | head -1)"
  fi
}

# In the background, with mpirun_pid set to mpirun's own pid (its children are the ranks).
mpi_bg() {  # mpi_bg OUT NP args...
  local out=$1; shift
  (exec mpirun -np "$1" --oversubscribe "${@:2}" > "$out" 2>&1) &
  mpirun_pid=$!
}

# The world rank of a process started by mpirun (Open MPI exports it to each process).
rank_pid() {  # rank_pid MPIRUN_PID RANK
  local pid
  for pid in $(pgrep -P "$1"); do
    if tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2"; then echo "$pid"; return; fi
  done
}
wait_for() {  # wait_for SECONDS command...: polls every 10 ms
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.01; done
}
# True when none of the pids runs (a zombie waiting to be reaped counts as gone).
all_gone() {
  local p
  for p in "$@"; do
    [ -e /proc/$p ] && [ "$(awk '{print $3}' /proc/$p/stat 2>/dev/null)" != Z ] && return 1
  done
  return 0
}
metrics_at_step() { grep -q "\"step\": $2," "$1" 2>/dev/null; }
