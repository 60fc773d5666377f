#!/usr/bin/env bash
# pipetrain-gpt as a user runs it. Bad input: each case must exit != 0 with one clear message.
# Then a short pipelined run (2 stages, 2 micro-batches) on the King James Bible must print a
# validation loss and a sample, and write metrics. Exit 77 (skip) when Debian's `bible`
# program (package bible-kjv) is not installed.
set -uo pipefail
exe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"  # the Bible is cached here, not in the user's cache
fails=0

expect_error() {  # expect_error "what it must say" args...
  local want=$1; shift
  local out rc
  out=$("$exe" "$@" 2>&1); rc=$?
  if [ $rc -eq 0 ] || ! grep -qF -- "$want" <<<"$out"; then
    echo "FAIL: '$*' gave rc=$rc, expected an error containing '$want'. Output:"; echo "$out"; fails=$((fails+1))
  else
    echo "ok: $* -> $(grep -F -- "$want" <<<"$out" | head -1)"
  fi
}

expect_error "The following argument was not expected: --bogus" --bogus
expect_error "d_model 256 is not divisible by n_heads 3" --heads 3 --steps 1
expect_error "--steps 0 must be >= 1" --steps 0
expect_error "temperature must be >= 0" --temperature -1 --steps 1
expect_error "top-k must be >= 0" --top-k -1 --steps 1
expect_error "--prompt is empty" --prompt "" --steps 1
expect_error "cannot open text corpus '$work/nowhere.txt'" --data "$work/nowhere.txt" --steps 1
expect_error "--microbatches 20 is more than the --batch of 16" --microbatches 20 --steps 1
expect_error "cannot split" --stages 12 --plan-only
expect_error "lists 1 device but --stages 2 x --dp 1 needs 2" --stages 2 --devices cpu:0 --plan-only
expect_error "--val-fraction 1.5 must be between 0 and 1" --val-fraction 1.5 --steps 1
printf 'In the beginning' > "$work/short.txt"
expect_error "too few to split" --data "$work/short.txt" --steps 1
printf 'In the beginning God created the heaven and the earth.\n%.0s' {1..20} > "$work/small.txt"
expect_error "no evaluation window of context 128 fits" --data "$work/small.txt" --steps 1
# Without the program (and nothing cached) the message names the package to install.
out=$(PATH=/nonexistent "$exe" --steps 1 2>&1); rc=$?
if [ $rc -ne 0 ] && grep -q "apt-get install bible-kjv" <<<"$out"; then
  echo "ok: no bible program -> $out"
else
  echo "FAIL: without the bible program: rc=$rc"; echo "$out"; fails=$((fails+1))
fi
# Output paths are checked before any text is read or any step taken.
mkdir -p "$work/adir"
expect_error "--metrics /nonexistent/m.jsonl: the folder /nonexistent does not exist; create it or choose another path" \
  --metrics /nonexistent/m.jsonl --steps 100000
expect_error "--metrics $work/adir: it is a folder, not a regular file" --metrics "$work/adir" --steps 100000
expect_error "--trace /dev/null: it is a character device, not a regular file" --trace /dev/null --steps 100000
[ -c /dev/null ] || { echo "FAIL: /dev/null is no longer a character device"; fails=$((fails+1)); }
expect_error "--timeline $work/adir: it is a folder" --timeline "$work/adir" --steps 100000
rmdir "$work/adir"
out=$("$exe" --stages 2 --microbatches 2 --plan-only 2>&1) && grep -q "predicted step time" <<<"$out" \
  && echo "ok: --stages 2 --plan-only plans" || { echo "FAIL: --plan-only"; echo "$out"; fails=$((fails+1)); }

# A short run on a text file (no bible needed), one device.
small=(--context 32 --d-model 32 --layers 2 --heads 2 --batch 4 --eval-windows 8 --sample-bytes 20)
if "$exe" --steps 2 "${small[@]}" --data "$work/small.txt" --prompt "In the" > "$work/file.txt" 2>&1 \
   && grep -q "validation loss" "$work/file.txt" && grep -q "^In the" "$work/file.txt"; then
  echo "ok: 2 steps on a text file"
else
  echo "FAIL: run on a text file"; cat "$work/file.txt"; fails=$((fails+1))
fi

if ! command -v bible >/dev/null; then
  echo "skip: the bible program (Debian package bible-kjv) is not installed"
  [ $fails -eq 0 ] && exit 77 || exit 1
fi

# 3 steps, 2 stages, 2 micro-batches on the Bible: a validation loss, a sample, metrics.
if "$exe" --steps 3 --stages 2 --microbatches 2 "${small[@]}" --eval-every 2 --metrics "$work/m.jsonl" \
     > "$work/run.txt" 2>&1 \
   && grep -q "step 2: validation loss" "$work/run.txt" \
   && grep -q "final validation loss" "$work/run.txt" \
   && grep -q "^And God said" "$work/run.txt" \
   && [ "$(grep -c '"loss"' "$work/m.jsonl")" -eq 3 ] \
   && grep -q '"val_loss"' "$work/m.jsonl" \
   && [ -s "$XDG_CACHE_HOME/pipetrain/bible-kjv.txt" ]; then
  echo "ok: 3 pipelined steps on the Bible: $(grep 'final validation loss' "$work/run.txt")"
else
  echo "FAIL: 3 pipelined steps"; cat "$work/run.txt"; cat "$work/m.jsonl" 2>/dev/null; fails=$((fails+1))
fi

[ $fails -eq 0 ] && echo "all pipetrain-gpt CLI checks passed" || echo "$fails check(s) failed"
[ $fails -eq 0 ]
