# Sourced by the multi-process example tests (fashion_ps.sh, fashion_ps_stages.sh): run "$exe"
# on "$data", with or without mpirun, and check how it ends or what it saved. Each check prints
# "ok: ..." or "FAIL: ..." and counts failures in $fails. Set by the caller: exe, data, here;
# optional: mpirun_flags (extra mpirun options), run_extra (options added to every run).

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
