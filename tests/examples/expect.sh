# Sourced by the example CLI tests: run "$exe" (the program under test) with arguments and check
# how it ends. Each helper prints "ok: ..." or "FAIL: ..." and counts failures in $fails.

expect_error() {  # expect_error "what it must say" args...: exit != 0 and the message
  local want=$1; shift
  local out rc
  out=$("$exe" "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: '$*' gave rc=$rc, expected an error containing '$want'. Output:"; echo "$out"; fails=$((fails+1))
  else
    echo "ok: $* -> $(grep -F -- "$want" <<<"$out" | head -1)"
  fi
}

# expect_refused "what it must say" args...: exit 2 (a usage error) within 120 s, the message, and
# not one training step taken (no "train N/M" progress line).
expect_refused() {
  local want=$1; shift
  local out rc
  out=$(timeout 120 "$exe" "$@" 2>&1); rc=$?
  if [ $rc -ne 2 ] || ! grep -qF -- "$want" <<<"$out" || grep -qE '(^|'$'\r'')train [0-9]' <<<"$out"; then
    echo "FAIL: '$*' gave rc=$rc, expected exit 2 before training with '$want'. Output:"; echo "$out"; fails=$((fails+1))
  else
    echo "ok: $* -> $(grep -F -- "$want" <<<"$out" | head -1)"
  fi
}
