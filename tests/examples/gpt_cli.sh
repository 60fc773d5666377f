#!/usr/bin/env bash
# pipetrain-gpt as a user runs it. Bad input: each case must exit != 0 with one clear message.
# Token files (llm.c's and raw uint16): a short run each, the vocabulary a resume must match, a
# clear refusal for each way a file or flag is wrong. Checkpoints on a generated text (always run): save and resume give the uninterrupted run's
# final loss, also resharded onto 2 stages; --save-every/--keep; settings that must match;
# --parity-check; SIGTERM stops with 75 and a checkpoint that resumes. Then a short pipelined
# run (2 stages, 2 micro-batches) on the King James Bible must print a validation loss and a
# sample, and write metrics. Exit 77 (skip) when Debian's `bible` program (package bible-kjv) is
# not installed.
set -uo pipefail
exe=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export XDG_CACHE_HOME="$work/cache"  # the Bible is cached here, not in the user's cache
fails=0

source "$(dirname "$0")/expect.sh"  # expect_error, expect_refused

expect_refused "The following argument was not expected: --bogus" --bogus
# Issue 37: empty values refused (an unset shell variable), a number that is not one states the
# flag's range, --help groups the flags and shows every default.
for flag in --data --metrics --resume --save --trace --optim; do
  expect_refused "$flag: the value is empty (an unset shell variable?)" $flag ""
done
expect_refused "--context: 1k must be an integer between 1 and 1048576" --context 1k
expect_refused "--sample-bytes: some must be an integer >= 0" --sample-bytes some
expect_help "Model Data Training Sampling Parallelism Schedule Checkpoints Diagnostics"
# Every numeric flag has a stated range, checked before any text is read (exit 2, no step).
expect_refused "--lr inf must be a finite number > 0 and <= 1000" --lr inf
expect_refused "--lr 1e+30 must be a finite number > 0 and <= 1000" --lr 1e30
expect_refused "--clip -1 must be a finite number >= 0" --clip -1
expect_refused "--warmup -5 must be an integer >= 0" --warmup -5
expect_refused "--min-lr -1 must be a finite number >= 0" --min-lr -1
expect_refused "--min-lr 1 must be at most --lr 0.0003" --min-lr 1
expect_refused "--weight-decay -1 must be a finite number >= 0" --weight-decay -1
expect_refused "--steps -1 must be an integer >= 1" --steps -1
expect_refused "--log-every 0 must be an integer >= 1" --log-every 0
expect_refused "--eval-windows -1 must be an integer >= 0" --eval-windows -1
expect_refused "--threads -1 must be an integer between 0 and" --threads -1
expect_refused "--threads $((4 * $(nproc) + 1)) must be an integer between 0 and $((4 * $(nproc)))" --threads $((4 * $(nproc) + 1))
expect_refused "--timeout inf must be a finite number > 0 and <= 1000000" --timeout inf
expect_refused "--timeout 10000000000 must be a finite number > 0" --timeout 1e10
expect_refused "--bucket-mb 0 must be a finite number > 0" --bucket-mb 0
expect_refused "--mem-cap -1 must be a finite number >= 0" --mem-cap -1
expect_refused "temperature must be >= 0" --temperature -1
expect_refused "temperature must be >= 0 (0: always the most likely token) but got inf" --temperature inf
expect_refused "top-k must be >= 0" --top-k -1
expect_refused "--val-fraction 0 must be between 0 and 1" --val-fraction 0
for flag in --context --d-model --layers --heads --batch; do
  expect_refused "$flag 0 must be an integer" "$flag" 0
done
expect_error "--seed: -1 must be an integer between 0 and 2^64 - 1" --seed -1 --plan-only
expect_error "--steps: 99999999999999999999 must be an integer" --steps 99999999999999999999 --plan-only
expect_error "--heads: 99999999999 must be an integer" --heads 99999999999 --plan-only
# A --data FIFO (opening it would wait forever for a writer) or folder is refused before it is opened.
mkfifo "$work/data-fifo"
expect_refused "cannot read text corpus '$work/data-fifo': it is a FIFO (named pipe), not a regular file" --data "$work/data-fifo"
rm -f "$work/data-fifo"
expect_refused "cannot read text corpus '$work': it is a folder" --data "$work"
expect_error "d_model 256 is not divisible by n_heads 3" --heads 3 --steps 1
expect_error "--steps 0 must be an integer >= 1" --steps 0
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
echo x > "$work/afile"  # missing folders above a path are created (below); a file in the way is not
expect_refused "--metrics $work/afile/m.jsonl: $work/afile is a regular file, not a folder; choose another path" \
  --metrics "$work/afile/m.jsonl" --steps 100000
expect_error "--metrics $work/adir: it is a folder, not a regular file" --metrics "$work/adir" --steps 100000
expect_error "--trace /dev/null: it is a character device, not a regular file" --trace /dev/null --steps 100000
[ -c /dev/null ] || { echo "FAIL: /dev/null is no longer a character device"; fails=$((fails+1)); }
expect_error "--timeline $work/adir: it is a folder" --timeline "$work/adir" --steps 100000
rmdir "$work/adir"
out=$("$exe" --stages 2 --microbatches 2 --plan-only 2>&1) && grep -q "predicted step time" <<<"$out" \
  && echo "ok: --stages 2 --plan-only plans" || { echo "FAIL: --plan-only"; echo "$out"; fails=$((fails+1)); }

# A short run on a text file (no bible needed), one device.
small=(--context 32 --d-model 32 --layers 2 --heads 2 --batch 4 --eval-windows 8 --sample-bytes 20)
if "$exe" --steps 2 "${small[@]}" --data "$work/small.txt" --prompt "In the" \
     --metrics "$work/new/sub/m.jsonl" > "$work/file.txt" 2>&1 \
   && grep -q "validation loss" "$work/file.txt" && grep -q "^In the" "$work/file.txt" \
   && [ -s "$work/new/sub/m.jsonl" ]; then
  echo "ok: 2 steps on a text file (--metrics under missing folders, created)"
else
  echo "FAIL: run on a text file"; cat "$work/file.txt"; fails=$((fails+1))
fi

# ---- token files (--data-format, --vocab): llm.c's header + uint16 tokens, and raw uint16 ----
# le16 V...: the values as little-endian uint16 into $bin (printf's escapes; builtins only).
le16() { local t lo hi; bin=""; for t in "$@"; do
  printf -v lo '%02x' $((t & 255)); printf -v hi '%02x' $((t >> 8)); bin+="\\x$lo\\x$hi"; done; }
ids=(); for i in $(seq 0 1999); do ids+=($(( (i * 7919 + 13) % 50257 ))); done
le16 2000 0; count=$bin  # the token count as an int32: 2000 = 0x7d0
{ printf '\x88\xd8\x34\x01\x01\x00\x00\x00'"$count"; head -c 1012 /dev/zero; le16 "${ids[@]}"; printf "$bin"; } > "$work/gpt2.tokens"
chars=(); for i in $(seq 0 1999); do chars+=($(( i * 7 % 65 ))); done
le16 "${chars[@]}"; printf "$bin" > "$work/chars.bin"
tok=(--context 16 --d-model 32 --layers 1 --heads 2 --batch 4 --eval-windows 4 --eval-every 0)
# llm.c's magic is recognised whatever the name; GPT-2's vocabulary by default, padded to 50304.
if "$exe" "${tok[@]}" --steps 2 --data "$work/gpt2.tokens" --save "$work/tok-ck" > "$work/tok.txt" 2>&1 \
   && grep -q "data: llm.c token file '$work/gpt2.tokens' (2000 tokens)" "$work/tok.txt" \
   && grep -q "vocabulary: 50257 ids, the model's 50304" "$work/tok.txt" \
   && grep -q "final validation loss [0-9.]* nats/token" "$work/tok.txt" \
   && grep -q "^no sample: llm.c token file" "$work/tok.txt"; then
  echo "ok: 2 steps on an llm.c token file: $(grep -o 'final validation loss.*' "$work/tok.txt")"
else
  echo "FAIL: run on an llm.c token file"; cat "$work/tok.txt"; fails=$((fails+1))
fi
expect_error "was saved with --vocab 50257 but this run has --vocab 50304" \
  "${tok[@]}" --steps 3 --data "$work/gpt2.tokens" --vocab 50304 --resume "$work/tok-ck"
# nanoGPT's raw uint16 (a .bin name): --vocab is required, 65 is padded to 128.
if "$exe" "${tok[@]}" --steps 2 --data "$work/chars.bin" --vocab 65 --sample-bytes 0 > "$work/raw.txt" 2>&1 \
   && grep -q "vocabulary: 65 ids, the model's 128" "$work/raw.txt" && grep -q "final validation loss" "$work/raw.txt"; then
  echo "ok: 2 steps on a raw uint16 file (--vocab 65)"
else
  echo "FAIL: run on a raw uint16 file"; cat "$work/raw.txt"; fails=$((fails+1))
fi
expect_refused "which do not say their vocabulary: pass --vocab" "${tok[@]}" --data "$work/chars.bin"
expect_refused "holds token 14 at position 2 (counting from 0), outside the vocabulary [0, 10)" \
  "${tok[@]}" --data "$work/chars.bin" --vocab 10
expect_refused "its first int32 is 458752, not llm.c's magic 20240520" \
  "${tok[@]}" --data "$work/chars.bin" --data-format llmc
head -c 2001 "$work/chars.bin" > "$work/odd.bin"
expect_refused "it has 2001 bytes, an odd number" "${tok[@]}" --data "$work/odd.bin" --vocab 65
head -c 3000 "$work/gpt2.tokens" > "$work/cut.tokens"
expect_refused "its header counts 2000 tokens (5024 bytes with the header) but the file has 3000 bytes: it is truncated" \
  "${tok[@]}" --data "$work/cut.tokens"
expect_refused "--vocab 50257 applies to token files, but '$work/small.txt' is read as byte-level text" \
  "${tok[@]}" --data "$work/small.txt" --vocab 50257
expect_refused "unknown data format 'npy': use auto" --data-format npy
expect_refused "--vocab 70000 must be an integer between 1 and 65536" --data "$work/chars.bin" --vocab 70000
expect_refused "--vocab and --data-format llmc or uint16 apply to a --data token file" --vocab 50257
expect_refused "--vocab applies to token files; --data-format text is bytes" --data "$work/small.txt" --data-format text --vocab 5

# ---- checkpoints (on a generated text, so that they run without the bible) ----
for i in $(seq 1 200); do echo "Line $i: In the beginning God created the heaven and the earth, $((i * 7919 % 1000))."; done > "$work/text.txt"
base=(--context 32 --layers 2 --heads 2 --eval-windows 8 --eval-every 0 --sample-bytes 0 --data "$work/text.txt")
ck=("${base[@]}" --d-model 32 --batch 4)
final_loss() { grep -o 'final validation loss [0-9.]*' "$1"; }
run_ok() {  # run_ok OUTPUT args...: the run must exit 0
  local out=$1; shift
  "$exe" "${ck[@]}" "$@" > "$out" 2>&1 || { echo "FAIL: '$*' exited $?:"; cat "$out"; fails=$((fails+1)); return 1; }
}
# Save after 3 steps, resume to 6: the same final loss as 6 uninterrupted steps (identical
# parameters give identical text). Metrics continue: 6 step lines in all.
if run_ok "$work/full.txt" --steps 6 \
   && run_ok "$work/half.txt" --steps 3 --save "$work/ck" --metrics "$work/ck.jsonl" \
   && run_ok "$work/rest.txt" --steps 6 --resume "$work/ck" --metrics "$work/ck.jsonl"; then
  if [ -n "$(final_loss "$work/full.txt")" ] && [ "$(final_loss "$work/full.txt")" = "$(final_loss "$work/rest.txt")" ] \
     && grep -q "resumed from $work/ck at step 3" "$work/rest.txt" && [ -f "$work/ck/manifest.json" ] \
     && [ "$(grep -c '"loss"' "$work/ck.jsonl")" -eq 6 ]; then
    echo "ok: 3 steps + resume to 6 = 6 steps: $(final_loss "$work/rest.txt")"
  else
    echo "FAIL: resume to 6 steps: '$(final_loss "$work/full.txt")' uninterrupted, '$(final_loss "$work/rest.txt")' resumed"
    cat "$work/rest.txt" "$work/ck.jsonl"; fails=$((fails+1))
  fi
fi
# Resharding: a 1-stage checkpoint resumed as a 2-stage pipeline gives the same parameters.
if run_ok "$work/reshard.txt" --steps 6 --resume "$work/ck" --stages 2 --microbatches 1; then
  [ "$(final_loss "$work/full.txt")" = "$(final_loss "$work/reshard.txt")" ] \
    && echo "ok: 1-stage checkpoint resumed with --stages 2: $(final_loss "$work/reshard.txt")" \
    || { echo "FAIL: resharded resume: '$(final_loss "$work/reshard.txt")'"; cat "$work/reshard.txt"; fails=$((fails+1)); }
fi
# --update async (--untied: tied embeddings would sit on two stages, refused): windows of 4;
# 3 steps + resume to 6 give the uninterrupted async run's final loss.
async=(--stages 2 --microbatches 2 --untied --clip 0 --update async --async-window 4)
if run_ok "$work/async.txt" --steps 6 "${async[@]}" \
   && run_ok "$work/async_half.txt" --steps 3 "${async[@]}" --save "$work/ack" \
   && run_ok "$work/async_rest.txt" --steps 6 "${async[@]}" --resume "$work/ack"; then
  if [ -n "$(final_loss "$work/async.txt")" ] && [ "$(final_loss "$work/async.txt")" = "$(final_loss "$work/async_rest.txt")" ] \
     && grep -q "async updates (PipeDream-2BW, window 4 steps" "$work/async.txt"; then
    echo "ok: --update async, 3 steps + resume to 6 = 6 steps: $(final_loss "$work/async.txt")"
  else
    echo "FAIL: --update async resume: '$(final_loss "$work/async.txt")' vs '$(final_loss "$work/async_rest.txt")'"
    cat "$work/async.txt" "$work/async_rest.txt"; fails=$((fails+1))
  fi
fi
expect_error "share a tied parameter" "${ck[@]}" --steps 2 --stages 2 --microbatches 2 --clip 0 --update async
expect_refused "pass --clip 0 or --update sync" "${ck[@]}" --steps 2 --stages 2 --microbatches 2 --update async
# Nothing left to train: exit 0 and say so.
run_ok "$work/done.txt" --steps 3 --resume "$work/ck" && grep -q "nothing left to train" "$work/done.txt" \
  && echo "ok: resume at the last step: $(grep 'nothing left' "$work/done.txt")" \
  || { [ $? -ne 0 ] && echo "FAIL: resume at the last step"; cat "$work/done.txt"; fails=$((fails+1)); }
expect_error "was saved with --d-model 32 but this run has --d-model 64" \
  "${base[@]}" --batch 4 --d-model 64 --steps 6 --resume "$work/ck"
expect_error "was saved with --batch 4 but this run has --batch 8" "${base[@]}" --d-model 32 --batch 8 --steps 6 --resume "$work/ck"
# --parity-check restarts the reference from the run's state every step, so it checks a resumed
# run too (the steps after the checkpoint).
run_ok "$work/resumed-parity.txt" --parity-check --stages 2 --steps 5 --resume "$work/ck" \
  && grep -q "all 29 tensors are bit-identical to the single-device reference (2 steps, each from the run's own state)" "$work/resumed-parity.txt" \
  && echo "ok: --parity-check after --resume: $(grep '^parity:' "$work/resumed-parity.txt")" \
  || { echo "FAIL: --parity-check after --resume"; cat "$work/resumed-parity.txt"; fails=$((fails+1)); }
# --optim sgd (heavy-ball or Nesterov): bit-identical pipelined, and its checkpoint names the
# optimizer when resumed with another.
run_ok "$work/sgd-parity.txt" --optim sgd --lr 0.05 --nesterov --stages 2 --steps 2 --parity-check \
  && grep -q "all 29 tensors are bit-identical to the single-device reference" "$work/sgd-parity.txt" \
  && grep -q "sgd(lr=0.05, momentum=0.9, dampening=0, nesterov=true" "$work/sgd-parity.txt" \
  && echo "ok: --optim sgd --nesterov pipelined: $(grep '^parity:' "$work/sgd-parity.txt")" \
  || { echo "FAIL: --optim sgd parity"; cat "$work/sgd-parity.txt"; fails=$((fails+1)); }
run_ok "$work/sgd-save.txt" --optim sgd --lr 0.05 --steps 2 --save "$work/sgd-ck" \
  && expect_error "was trained with optimizer 'sgd' but this run uses 'adamw': pass --optim sgd" \
       "${ck[@]}" --steps 3 --resume "$work/sgd-ck"
expect_refused "unknown optimizer 'rmsprop': use sgd or adamw" "${ck[@]}" --optim rmsprop --steps 1
expect_error "--keep applies to the numbered checkpoints" "${ck[@]}" --steps 1 --save "$work/k" --keep 2
# --save-every 2 --keep 2 over 7 steps: step-6 and step-7 stay; latest: resumes the newest.
if run_ok "$work/every.txt" --steps 7 --save "$work/runs" --save-every 2 --keep 2; then
  got=$(ls "$work/runs" | tr '\n' ' ')
  [ "$got" = "step-00000006 step-00000007 " ] && echo "ok: --save-every 2 --keep 2 leaves $got" \
    || { echo "FAIL: --keep 2 left '$got'"; fails=$((fails+1)); }
  run_ok "$work/latest.txt" --steps 8 --resume "latest:$work/runs" \
    && grep -q "resumed from $work/runs/step-00000007 at step 7" "$work/latest.txt" \
    && echo "ok: --resume latest: picks step 7" || { echo "FAIL: latest:"; cat "$work/latest.txt"; fails=$((fails+1)); }
fi
# --parity-check: the 2-stage pipeline is bit-identical to the single-device reference.
run_ok "$work/parity.txt" --steps 3 --stages 2 --microbatches 2 --parity-check \
  && grep -q "all 29 tensors are bit-identical to the single-device reference (3 steps" "$work/parity.txt" \
  && echo "ok: $(grep '^parity:' "$work/parity.txt")" \
  || { echo "FAIL: parity check"; cat "$work/parity.txt"; fails=$((fails+1)); }
# SIGTERM: the run finishes its step, saves, says how to continue and exits 75; the checkpoint
# resumes.
"$exe" "${ck[@]}" --steps 100000 --log-every 1 --save "$work/pre" > "$work/pre.txt" 2>&1 &
pid=$!
for _ in $(seq 1 300); do grep -q "^train 1/" "$work/pre.txt" && break; sleep 0.1; done
kill -TERM $pid
for _ in $(seq 1 300); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && { echo "FAIL: still running 30 s after SIGTERM"; kill -KILL $pid; }
wait $pid; rc=$?
at=$(grep -o 'stopped early (SIGTERM) after step [0-9]*' "$work/pre.txt" | grep -o '[0-9]*$')
if [ $rc -eq 75 ] && [ -n "$at" ] && grep -q "continue with --resume $work/pre" "$work/pre.txt" \
   && run_ok "$work/pre2.txt" --steps $((at + 1)) --resume "$work/pre" \
   && grep -q "resumed from $work/pre at step $at" "$work/pre2.txt"; then
  echo "ok: SIGTERM -> exit 75 after step $at, and the checkpoint resumes"
else
  echo "FAIL: SIGTERM gave rc=$rc"; cat "$work/pre.txt"; cat "$work/pre2.txt" 2>/dev/null; fails=$((fails+1))
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
   && [ -s "$XDG_CACHE_HOME/pipetrain/bible-kjv.cache" ]; then
  echo "ok: 3 pipelined steps on the Bible: $(grep -a 'final validation loss' "$work/run.txt")"
else
  echo "FAIL: 3 pipelined steps"; cat "$work/run.txt"; cat "$work/m.jsonl" 2>/dev/null; fails=$((fails+1))
fi

[ $fails -eq 0 ] && echo "all pipetrain-gpt CLI checks passed" || echo "$fails check(s) failed"
[ $fails -eq 0 ]
