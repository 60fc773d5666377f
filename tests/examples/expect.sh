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

# expect_help "Group1 Group2 ..." [subcommand]: `$exe [subcommand] --help` exits 0, shows each
# group heading ("Model:" ...), puts no flag under CLI11's catch-all "Options:" but --help, and
# shows the default of every flag that takes a value: "=VALUE" after its type, or "default" in
# its text (for a default of none, or one said in words).
expect_help() {
  local groups=$1; shift
  local out rc g line bad=""
  out=$("$exe" "$@" --help 2>&1); rc=$?
  for g in $groups; do grep -qx "$g:" <<<"$out" || bad+=" no group '$g:';"; done
  # The flags listed under "Options:" (up to the next heading or blank line) other than --help.
  local catchall
  catchall=$(awk '/^Options:$/ {on=1; next} /^$|^[A-Za-z].*:$/ {on=0} on && /--/ && !/--help/' <<<"$out")
  [ -z "$catchall" ] || bad+=" flags in no group: $catchall;"
  # A flag line that takes a value (TEXT, INT, UINT, FLOAT) and shows no default. CLI11 puts a
  # long description on the next line: it is joined to its flag first.
  while IFS= read -r line; do
    bad+=" no default: $line;"
  done < <(awk '/^  --/ { if (prev != "") print prev; prev = $0; next }
               /^                  / && prev != "" { prev = prev $0; print prev; prev = ""; next }
               { if (prev != "") print prev; prev = "" }
               END { if (prev != "") print prev }' <<<"$out" |
           grep -E '^  --[a-z-]+ (TEXT|INT|UINT|FLOAT)' | grep -vE '^  --[a-z-]+ [A-Z:0-9]+=' | grep -v default)
  if [ $rc -ne 0 ] || [ -n "$bad" ]; then
    echo "FAIL: '$* --help' gave rc=$rc:$bad Output:"; echo "$out"; fails=$((fails+1))
  else
    echo "ok: $* --help groups its flags ($groups) and shows every default"
  fi
}
