#!/usr/bin/env bash
# Bad input to pipetrain-fashion: each case must exit != 0 with one clear message and leave no
# files behind; a short real run must work and write metrics and a checkpoint that resumes.
set -uo pipefail
exe=$1
data=${2:-/usr/share/datasets/fashion-mnist}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

source "$(dirname "$0")/expect.sh"  # expect_error, expect_refused

is_char_device_null() {  # /dev/null must survive every refused write
  [ -c /dev/null ] || { echo "FAIL: /dev/null is no longer a character device"; fails=$((fails+1)); }
}

# Fault injection (PIPETRAIN_FAULT) is only in the test-only build, pipetrain-fashion-faults.
if grep -q PIPETRAIN_FAULT "$exe"; then echo "FAIL: $exe has fault injection compiled in"; fails=$((fails+1)); fi

expect_error "unknown --model 'rnn'" --model rnn --steps 1
expect_error "--microbatches 300 is more than the --batch of 256" --microbatches 300 --steps 1
expect_error "The following argument was not expected: --bogus" --bogus
expect_error "unknown optimizer 'adam9'" --optim adam9 --steps 1
expect_error "dataset-fashion-mnist" --data "$work/nowhere" --steps 1
expect_error "unknown device 'tpu:0'" --devices tpu:0 --steps 1
expect_error "cannot open cuda:0" --devices cuda:0 --steps 1
expect_error "--precision bf16 needs CUDA devices" --devices cpu:0 --precision bf16 --steps 1
expect_error "unknown precision 'fp8'" --precision fp8 --steps 1
expect_error "--attention cudnn needs CUDA devices" --devices cpu:0 --attention cudnn --steps 1
expect_error "unknown attention kernel 'flash'" --attention flash --steps 1
expect_error "mixes CPU and CUDA devices" --devices cpu:0,cuda:0 --stages 2 --steps 1

# Every numeric flag has a stated range, checked before any data is read (exit 2, no step).
expect_refused "--lr inf must be a finite number > 0 and <= 1000" --lr inf --steps 100000
expect_refused "--lr 1e+30 must be a finite number > 0 and <= 1000" --lr 1e30 --steps 100000
expect_refused "--clip -1 must be a finite number >= 0" --clip -1 --steps 100000
expect_refused "--clip inf must be a finite number >= 0" --clip inf --steps 100000
expect_refused "--warmup -5 must be an integer >= 0" --warmup -5 --steps 100000
expect_refused "--threads -1 must be an integer between 0 and" --threads -1 --steps 100000
expect_refused "--threads $((4 * $(nproc) + 1)) must be an integer between 0 and $((4 * $(nproc))) (4 x the $(nproc) cores of this machine" \
  --threads $((4 * $(nproc) + 1)) --steps 100000
expect_refused "--steps -1 must be an integer >= 0" --steps -1
expect_refused "--epochs -2 must be an integer between 0 and 1000000" --epochs -2
expect_refused "--log-every 0 must be an integer >= 1" --log-every 0 --steps 100000
expect_refused "--timeout inf must be a finite number > 0 and <= 1000000" --timeout inf --steps 100000
expect_refused "--timeout 10000000000 must be a finite number > 0 and <= 1000000" --timeout 1e10 --steps 100000
expect_refused "--momentum 1 must be a finite number >= 0 and < 1" --momentum 1 --steps 100000
expect_refused "--momentum -0.5 must be a finite number >= 0 and < 1" --momentum -0.5 --steps 100000
expect_refused "--weight-decay -1 must be a finite number >= 0" --weight-decay -1 --steps 100000
expect_refused "--bucket-mb inf must be a finite number > 0" --bucket-mb inf --steps 100000
expect_refused "--bucket-mb -1 must be a finite number > 0" --bucket-mb -1 --steps 100000
expect_refused "--mem-cap -1 must be a finite number >= 0" --mem-cap -1 --steps 100000
expect_refused "--batch 0 must be an integer >= 1" --batch 0 --steps 100000
expect_refused "--stages 0 must be an integer >= 1" --stages 0 --steps 100000
# Text CLI11 would wrap (-1 into 2^64 - 1) or clamp (beyond 64 bits) is refused as it is parsed.
expect_error "--seed: -1 must be an integer between 0 and 2^64 - 1" --seed -1 --plan-only
expect_error "--seed: 18446744073709551616 must be an integer between 0 and 2^64 - 1" --seed 18446744073709551616 --plan-only
expect_error "--steps: 99999999999999999999 must be an integer >= 0" --steps 99999999999999999999 --plan-only
expect_error "--epochs: 99999999999999999999 must be an integer" --epochs 99999999999999999999 --plan-only
expect_error "--threads: 99999999999 must be an integer" --threads 99999999999 --plan-only

# Pipeline flags that cannot work: each is refused before anything runs.
sch=$(dirname "$0")/schedules
expect_error "cannot split 10 layers into 12 stages" --stages 12 --plan-only
expect_error "--microbatches must be >= 1" --stages 2 --microbatches 0 --plan-only
expect_error "layout" --stages 2 --partition layout:3,3 --plan-only
expect_error "--schedule dualpipev with --stages 3 --microbatches 4: dualpipev schedule needs at least 2 micro-batches per device, M >= 2D" \
  --stages 3 --microbatches 4 --schedule dualpipev --plan-only
expect_error "unknown schedule" --stages 2 --schedule 2f2b --plan-only
expect_error "cannot split 10 layers into 12 stages (6 devices x 2 chunks): use --stages <= 5" --stages 6 --schedule zbv --plan-only
expect_error "over --mem-cap 20.00 MiB: raise --mem-cap to at least" --stages 2 --microbatches 8 --schedule zbv --mem-cap 20 --plan-only
expect_error "unknown --recompute 'sometimes'" --stages 2 --recompute sometimes --plan-only
expect_error "lists 1 device but --stages 2 x --dp 1 needs 2" --stages 2 --devices cpu:0 --plan-only
expect_error "lists 3 devices but --stages 2 x --dp 2 needs 4" --stages 2 --dp 2 --devices cpu:0..2 --plan-only
expect_error "--dp 0 must be >= 1" --dp 0 --steps 1
expect_error "--bucket-mb 0 must be a finite number > 0" --dp 2 --bucket-mb 0 --steps 1
expect_error "--shard-optimizer needs --dp R >= 2" --shard-optimizer --steps 1
expect_error "--dp 4 x --microbatches 2 is more than the --batch of 7" --dp 4 --microbatches 2 --batch 7 --steps 1
expect_error "1B1" --stages 2 --microbatches 2 --schedule "file:$sch/missing_action.txt" --plan-only
expect_error "0F0" --stages 2 --microbatches 2 --schedule "file:$sch/extra_action.txt" --plan-only
expect_error "deadlock" --stages 2 --microbatches 2 --schedule "file:$sch/deadlock.txt" --plan-only
expect_error "<-- ERROR HERE" --stages 2 --microbatches 2 --schedule "file:$sch/deadlock.txt" --plan-only
expect_error "is for 2 devices and 2 micro-batches" --stages 2 --microbatches 4 --schedule "file:$sch/good_gpipe.txt" --plan-only
# A schedule "file" that is a FIFO (opening it would wait forever for a writer) or a folder.
mkfifo "$work/sched-fifo"
expect_refused "cannot read schedule file '$work/sched-fifo': it is a FIFO (named pipe), not a regular file" \
  --stages 2 --microbatches 2 --schedule "file:$work/sched-fifo" --steps 100000
rm -f "$work/sched-fifo"
expect_refused "cannot read schedule file '$sch': it is a folder" --stages 2 --microbatches 2 --schedule "file:$sch" --plan-only
# A schedule header claiming billions of micro-batches is refused before anything is allocated
# (it ended in std::bad_alloc after 30-50 s).
printf 'pipeline devices=2 stages=2 microbatches=2000000000\ndevice 0:\ndevice 1:\n' > "$work/huge.txt"
expect_refused "line 1: header field microbatches=2000000000 exceeds the limit of 1048576" \
  --stages 2 --microbatches 2 --schedule "file:$work/huge.txt" --plan-only
# A data folder whose IDX "file" is a FIFO or a device: refused, not waited on or read forever.
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then
  mkdir -p "$work/fifo-data"
  ln -s "$data"/* "$work/fifo-data/"
  rm "$work/fifo-data/train-images-idx3-ubyte.gz"
  mkfifo "$work/fifo-data/train-images-idx3-ubyte.gz"
  expect_refused "train-images-idx3-ubyte.gz: it is a FIFO (named pipe), not a regular file" --data "$work/fifo-data" --steps 1
  rm -rf "$work/fifo-data"
fi
out=$("$exe" --stages 2 --microbatches 2 --schedule "file:$sch/good_gpipe.txt" --plan-only 2>&1) \
  && grep -q "predicted step time" <<<"$out" && echo "ok: a hand-written schedule plans" \
  || { echo "FAIL: good schedule file"; echo "$out"; fails=$((fails+1)); }
out=$("$exe" --stages 2 --microbatches 4 --schedule dualpipev --plan-only 2>&1) \
  && grep -q "schedule dualpipev: 2 devices x 2 chunks, 4 micro-batches" <<<"$out" \
  && grep -q "per stage: 4 3 2 1; per device: 5 5" <<<"$out" \
  && echo "ok: dualpipev plans 2 chunks per device" \
  || { echo "FAIL: dualpipev plan"; echo "$out"; fails=$((fails+1)); }
# A V schedule (two stages per device) trains bit-identically to one device.
out=$("$exe" --stages 2 --microbatches 4 --schedule v-min --steps 2 --parity-check 2>&1) \
  && grep -q "bit-identical to the single-device reference" <<<"$out" \
  && echo "ok: v-min is bit-identical to one device" \
  || { echo "FAIL: v-min parity"; echo "$out"; fails=$((fails+1)); }

# Output paths are checked before any work: nothing is renamed over a device, a FIFO or a folder.
mkdir -p "$work/adir"
expect_refused "--trace $work/adir: it is a folder, not a regular file" --trace "$work/adir" --steps 100000
expect_refused "--timeline /dev/null: it is a character device" --timeline /dev/null --steps 100000
is_char_device_null
mkfifo "$work/fifo"
expect_refused "--trace $work/fifo: it is a FIFO" --trace "$work/fifo" --steps 100000
[ -p "$work/fifo" ] || { echo "FAIL: the FIFO was replaced"; fails=$((fails+1)); }
rm -f "$work/fifo"
# Missing folders above an output path are created when it is written (a real run below); a
# file in their way is refused.
echo "precious" > "$work/in-the-way"
expect_refused "--timeline $work/in-the-way/sub/t.svg: $work/in-the-way is a regular file, not a folder" \
  --timeline "$work/in-the-way/sub/t.svg" --steps 100000
expect_refused "--save $work/in-the-way/x: $work/in-the-way is a regular file, not a folder" \
  --save "$work/in-the-way/x" --steps 100000
grep -q precious "$work/in-the-way" || { echo "FAIL: a refused path changed a file"; fails=$((fails+1)); }
rm -f "$work/in-the-way"
# A dangling symbolic link is refused, not replaced by a file (or a folder) of the output.
ln -s "$work/nowhere/t.out" "$work/dangling"
for flag in --trace --timeline --metrics --save --save-init; do
  expect_refused "$flag $work/dangling: $work/dangling is a symbolic link to $work/nowhere/t.out, which does not exist" \
    $flag "$work/dangling" --steps 100000
done
[ -L "$work/dangling" ] && [ ! -e "$work/nowhere" ] || { echo "FAIL: the dangling link was replaced or followed"; fails=$((fails+1)); }
rm -f "$work/dangling"
# Empty values (an unset shell variable: --save "$CKPT") are refused, not taken for "no
# checkpoint", "from scratch" or "no output".
for flag in --resume --save --save-init --metrics --trace --timeline --flight-recorder --write-costs \
            --async-delay --schedule --devices --data --slow-worker; do
  expect_refused "$flag: the value is empty (an unset shell variable?); give one, or leave the flag out" \
    $flag "" --steps 100000
done
# A bad command line exits 2, as every other usage error; a number that is not one states the
# flag's own range, not the type's.
expect_refused "The following argument was not expected: --bogus" --bogus
expect_refused "--ps: abc must be an integer between 1 and 1024" --ps abc --steps 100000
expect_refused "--staleness: x must be an integer between 0 and 1000000" --staleness x --steps 100000
expect_refused "--stages: two must be an integer >= 1" --stages two --steps 100000
expect_refused "--epochs: 1e3 must be an integer between 0 and 1000000" --epochs 1e3
expect_refused "--keep: all must be an integer >= 0" --keep all --steps 100000
# --ps and --staleness say one range each, whichever check refuses the value.
expect_refused "--ps 0 must be an integer between 1 and 1024" --ps 0 --steps 100000
expect_refused "--ps 2000 must be an integer between 1 and 1024" --ps 2000 --dp 2 --steps 100000
expect_refused "--staleness -1 must be an integer between 0 and 1000000" --ps 1 --dp 2 --staleness -1 --steps 100000
expect_refused "--staleness 2000000 must be an integer between 0 and 1000000" --ps 1 --dp 2 --staleness 2000000 --steps 100000
expect_refused "--slow-worker 0:2 slows one data-parallel replica against the others, and this run has one (--dp 1)" \
  --slow-worker 0:2 --steps 100000
expect_refused "--resume latest: names no folder: give latest:DIR" --resume latest: --steps 100000
expect_refused "bad device 'cpu:0..999999': the index 999999 is above the largest, 4096" \
  --plan auto --devices cpu:0..999999 --plan-only
expect_help "Model Data Training Parallelism Schedule Checkpoints Diagnostics"
if [ -f "$data/train-images-idx3-ubyte.gz" ]; then  # --save and --metrics are checked once the data is read
  expect_refused "--save /dev/null: it exists and is not a folder (checkpoints are folders" --save /dev/null --steps 100000 --data "$data"
  is_char_device_null
  expect_refused "--save-init /dev/null: it exists and is not a folder" --save-init /dev/null --steps 100000 --data "$data"
  is_char_device_null
  ln -s /dev/null "$work/null-link"
  expect_refused "--save $work/null-link: it exists and is not a folder" --save "$work/null-link" --steps 100000 --data "$data"
  is_char_device_null
  echo "precious" > "$work/afile"
  expect_refused "--save $work/afile: it exists and is not a folder" --save "$work/afile" --steps 100000 --data "$data"
  mkdir -p "$work/notckpt"
  expect_refused "--save $work/notckpt: it is a folder but not a checkpoint" --save "$work/notckpt" --steps 100000 --data "$data"
  rmdir "$work/notckpt"
  grep -q precious "$work/afile" || { echo "FAIL: a refused --save changed a file"; fails=$((fails+1)); }
  rm -f "$work/afile"
  expect_refused "--save-every needs --save DIR" --save-every 5 --steps 100000 --data "$data"
  expect_refused "--keep applies to the numbered checkpoints" --save "$work/k" --keep 2 --steps 100000 --data "$data"
  expect_refused "--resume $work/nothing: it does not exist" --resume "$work/nothing" --steps 100000 --data "$data"
  expect_refused "holds no complete numbered checkpoint" --resume "latest:$work" --steps 100000 --data "$data"
  is_char_device_null
  expect_refused "--metrics $work/adir: it is a folder" --metrics "$work/adir" --steps 100000 --data "$data"
  rm -f "$work/null-link"
fi
rmdir "$work/adir"

# A corrupt data file.
mkdir -p "$work/bad"
for f in train-images-idx3-ubyte.gz train-labels-idx1-ubyte.gz t10k-images-idx3-ubyte.gz t10k-labels-idx1-ubyte.gz; do
  cp "$data/$f" "$work/bad/$f" 2>/dev/null || true
done
if [ -f "$work/bad/train-images-idx3-ubyte.gz" ]; then
  head -c 100000 "$data/train-images-idx3-ubyte.gz" > "$work/bad/train-images-idx3-ubyte.gz"
  expect_error "train-images-idx3-ubyte.gz" --data "$work/bad" --steps 1

  # A short real run with metrics and a checkpoint, then a resume. A temporary folder that an
  # interrupted save left (".c.tmp.*") is removed; a look-alike of another name is not.
  mkdir -p "$work/.c.tmp.999.0" "$work/.other.tmp.999.0"
  if ! "$exe" --steps 4 --batch 64 --microbatches 2 --metrics "$work/m.jsonl" --save "$work/c" \
       --save-init "$work/init" --data "$data" > "$work/run.txt" 2>&1; then
    echo "FAIL: short run"; cat "$work/run.txt"; fails=$((fails+1))
  fi
  [ -d "$work/.c.tmp.999.0" ] && { echo "FAIL: the stale temporary of --save c was not removed"; fails=$((fails+1)); }
  [ -d "$work/.other.tmp.999.0" ] || { echo "FAIL: a temporary of another path was removed"; fails=$((fails+1)); }
  rmdir "$work/.other.tmp.999.0"
  [ "$(grep -c '"loss"' "$work/m.jsonl")" -eq 4 ] || { echo "FAIL: metrics lines"; fails=$((fails+1)); }
  [ -f "$work/init/manifest.json" ] || { echo "FAIL: --save-init wrote nothing"; fails=$((fails+1)); }
  # Resumed with the same --metrics: the file continues (steps 1..6, each once).
  "$exe" --steps 6 --batch 64 --microbatches 2 --resume "$work/c" --metrics "$work/m.jsonl" --data "$data" > "$work/resume.txt" 2>&1 \
    && grep -q "resumed from" "$work/resume.txt" || { echo "FAIL: resume"; cat "$work/resume.txt"; fails=$((fails+1)); }
  steps_logged=$(grep -o '^{"step": [0-9]*' "$work/m.jsonl" | cut -d' ' -f2 | tr '\n' ' ')
  [ "$steps_logged" = "1 2 3 4 5 6 " ] && echo "ok: the metrics file continues on resume" \
    || { echo "FAIL: metrics after resume have steps '$steps_logged'"; fails=$((fails+1)); }
  expect_error "was saved with --model mlp but this run has --model cnn" --model cnn --steps 6 --batch 64 --resume "$work/c" --data "$data"
  expect_error "--batch 64" --steps 6 --batch 32 --resume "$work/c" --data "$data"
  expect_error "was saved with --no-shuffle false but this run has --no-shuffle true" --steps 6 --batch 64 \
    --no-shuffle --resume "$work/c" --data "$data"
  cp -r "$work/c" "$work/cut"
  truncate -s 1000 "$work/cut/part-00000.safetensors"
  expect_error "piece part-00000.safetensors has 1000 bytes" --steps 6 --batch 64 --resume "$work/cut" --data "$data"
  rm "$work/cut/manifest.json"
  expect_error "has no manifest.json" --steps 6 --batch 64 --resume "$work/cut" --data "$data"
  rm -r "$work/cut"
  expect_error "cannot be resumed from" --steps 6 --batch 64 --resume "$work/init" --data "$data"
  # A metrics write error (the file size limit stands in for a full disk) stops the run.
  out=$( (trap '' XFSZ; ulimit -f 1; "$exe" --steps 100 --batch 64 --metrics "$work/full.jsonl" --data "$data" 2>&1 | cat) )
  grep -q "writing the metrics file $work/full.jsonl failed" <<<"$out" && ! grep -q "train 100/100" <<<"$out" \
    && echo "ok: a metrics write error stops the run" \
    || { echo "FAIL: metrics write error"; echo "$out" | tail -5; fails=$((fails+1)); }
  # A checkpoint write that fails (the file size limit stands in for a full disk): the run says
  # so and fails, the previous checkpoint at that path stays whole, no temporary is left.
  out=$( (trap '' XFSZ; ulimit -f 2000; "$exe" --steps 6 --batch 64 --microbatches 2 --resume "$work/c" --save "$work/c" --data "$data" 2>&1 | cat) )
  if grep -q "writing the piece failed: .*File too large.*is intact" <<<"$out" && grep -q '"step": "4"' "$work/c/manifest.json" \
     && ! ls -a "$work" | grep -q '^\.c\.tmp'; then
    echo "ok: a failed checkpoint write leaves the previous one: $(grep -m1 '^error' <<<"$out" | cut -c1-160)"
  else
    echo "FAIL: failed checkpoint write"; echo "$out" | tail -5; ls -a "$work"; fails=$((fails+1))
  fi
  # SIGTERM (what a batch scheduler sends before it kills): the step ends, the checkpoint is
  # written, exit 75; resuming reaches the same weights as an uninterrupted run.
  "$exe" --steps 30 --batch 64 --seed 5 --threads 1 --log-every 1 --save "$work/full" --data "$data" > "$work/full.txt" 2>&1
  "$exe" --steps 30 --batch 64 --seed 5 --threads 1 --log-every 1 --save "$work/pre" --metrics "$work/pre.jsonl" --data "$data" > "$work/pre.txt" 2>&1 &
  pid=$!
  for _ in $(seq 500); do grep -q '"step": 3,' "$work/pre.jsonl" 2>/dev/null && break; sleep 0.02; done
  kill -TERM $pid; wait $pid; rc=$?
  if [ $rc -eq 75 ] && grep -q "stopped early (SIGTERM)" "$work/pre.txt" && [ -f "$work/pre/manifest.json" ]; then
    echo "ok: SIGTERM -> exit 75: $(grep "stopped early" "$work/pre.txt")"
  else
    echo "FAIL: SIGTERM gave rc=$rc"; tail -5 "$work/pre.txt"; fails=$((fails+1))
  fi
  "$exe" --steps 30 --batch 64 --seed 5 --threads 1 --resume "$work/pre" --save "$work/pre" --data "$data" > "$work/pre2.txt" 2>&1
  if command -v python3 >/dev/null; then
    out=$(python3 "$(dirname "$0")/compare_checkpoints.py" --quiet "$work/full" "$work/pre") \
      && echo "$out (SIGTERM, then resume)" || { echo "FAIL: $out"; fails=$((fails+1)); }
  fi
  # Missing folders above every output path are created (as PyTorch's and Megatron's savers do).
  if "$exe" --steps 2 --batch 64 --stages 2 --microbatches 2 --trace "$work/deep/a/t.json" \
       --timeline "$work/deep/b/t.svg" --metrics "$work/deep/c/m.jsonl" --save "$work/deep/d/ckpt" \
       --save-init "$work/deep/e/init" --data "$data" > "$work/deep.txt" 2>&1 \
     && [ -s "$work/deep/a/t.json" ] && [ -s "$work/deep/b/t.svg" ] && [ -s "$work/deep/c/m.jsonl" ] \
     && [ -f "$work/deep/d/ckpt/manifest.json" ] && [ -f "$work/deep/e/init/manifest.json" ]; then
    echo "ok: missing folders above --trace, --timeline, --metrics, --save and --save-init are created"
  else
    echo "FAIL: outputs under missing folders"; cat "$work/deep.txt"; find "$work/deep"; fails=$((fails+1))
  fi
  "$exe" --steps 4 --batch 64 --save-every 2 --save "$work/deep/f/numbered" --data "$data" > "$work/deep2.txt" 2>&1 \
    && [ -f "$work/deep/f/numbered/step-00000004/manifest.json" ] \
    && echo "ok: --save-every under missing folders" \
    || { echo "FAIL: --save-every under missing folders"; cat "$work/deep2.txt"; fails=$((fails+1)); }
  # The clip message names the flag there is (--clip), not --clip-norm.
  expect_error "--clip with --staleness 1 needs --ps 1" --clip 1 --dp 2 --ps 2 --staleness 1 \
    --devices cpu:0..1 --steps 1 --batch 64 --data "$data"
  out=$("$exe" --clip 1 --dp 2 --ps 2 --staleness 1 --devices cpu:0..1 --steps 1 --batch 64 --data "$data" 2>&1)
  grep -q -- "--clip-norm" <<<"$out" && { echo "FAIL: a message names --clip-norm: $out"; fails=$((fails+1)); }
  # A pipelined run: 2 stages, trace and timeline, parity with the single-device reference.
  if "$exe" --steps 3 --batch 64 --stages 2 --microbatches 4 --schedule zb-h1 --recompute always \
       --trace "$work/t.json" --timeline "$work/t.svg" --parity-check --data "$data" > "$work/pipe.txt" 2>&1 \
     && grep -q "bit-identical" "$work/pipe.txt" && [ -s "$work/t.json" ] && grep -q "</svg>" "$work/t.svg"; then
    echo "ok: pipelined run with trace, timeline and parity check"
  else
    echo "FAIL: pipelined run"; cat "$work/pipe.txt"; fails=$((fails+1))
  fi
  # Resuming a pipelined run from a single-device checkpoint (names are global layer indices).
  "$exe" --steps 6 --batch 64 --microbatches 2 --stages 2 --resume "$work/c" --data "$data" > "$work/resume2.txt" 2>&1 \
    && grep -q "resumed from" "$work/resume2.txt" && echo "ok: resume under another partition" \
    || { echo "FAIL: resume with --stages 2"; cat "$work/resume2.txt"; fails=$((fails+1)); }
  # Another layout, schedule and partition, bit for bit: 3 steps on one device, then 3 more on 2
  # stages with zb-h1 and the params partition, against 6 uninterrupted steps on one device (one
  # thread per device everywhere: the GEMMs' arithmetic depends on the thread count).
  one=(--batch 64 --microbatches 2 --threads 1 --data "$data")
  "$exe" "${one[@]}" --steps 6 --save "$work/u6" > /dev/null 2>&1
  "$exe" "${one[@]}" --steps 3 --save "$work/u3" > /dev/null 2>&1
  "$exe" "${one[@]}" --steps 6 --stages 2 --schedule zb-h1 --partition params --resume "$work/u3" \
    --save "$work/r6" > "$work/r6.txt" 2>&1 || { echo "FAIL: resume on 2 stages"; cat "$work/r6.txt"; fails=$((fails+1)); }
  if command -v python3 >/dev/null; then
    out=$(python3 "$(dirname "$0")/compare_checkpoints.py" --quiet "$work/u6" "$work/r6") \
      && echo "$out (1 device -> 2 stages, zb-h1, params partition)" || { echo "FAIL: $out"; fails=$((fails+1)); }
  fi
  # Resuming a pipelined run at its last step: nothing left to train, said plainly, exit 0, and the
  # checkpoint's test accuracy still reported (no trace of a step that did not run).
  if "$exe" --steps 4 --batch 64 --microbatches 2 --stages 2 --resume "$work/c" \
       --trace "$work/t4.json" --data "$data" > "$work/resume3.txt" 2>&1 \
     && grep -q "nothing left to train: checkpoint .*c is already at step 4 of the 4 steps" "$work/resume3.txt" \
     && grep -q "test accuracy" "$work/resume3.txt" && ! grep -q "^error" "$work/resume3.txt"; then
    echo "ok: resume at the last step -> $(grep "nothing left" "$work/resume3.txt")"
  else
    echo "FAIL: resume at the last step"; cat "$work/resume3.txt"; fails=$((fails+1))
  fi
  # --parity-check restarts the reference from the run's state every step: it checks the steps
  # of a resumed run too.
  if "$exe" --steps 6 --batch 64 --microbatches 2 --stages 2 --parity-check --resume "$work/c" \
       --data "$data" > "$work/resume-parity.txt" 2>&1 \
     && grep -q "all 10 tensors are bit-identical to the single-device reference (2 steps, each from the run's own state)" "$work/resume-parity.txt"; then
    echo "ok: --parity-check after --resume: $(grep '^parity:' "$work/resume-parity.txt")"
  else
    echo "FAIL: --parity-check after --resume"; cat "$work/resume-parity.txt"; fails=$((fails+1))
  fi
  # No temporary files left behind by any of the above.
  if ls -a "$work" | grep -q '\.tmp'; then echo "FAIL: temporary files left: $(ls -a "$work")"; fails=$((fails+1)); fi
fi

echo "$fails failed"
[ $fails -eq 0 ]
