#!/usr/bin/env bash
# What --tp-overlap buys where a collective waits for a wire, not for the CPU: pipetrain-gpt at
# --tp 2 with its two ranks on two "hosts" (network namespaces joined by a veth pair, MPI over
# TCP: scripts/two-hosts-lib.sh), one process per host, through a link limited with tc tbf, with
# --tp-overlap off, backward and on, in turn, --reps times each. On one machine's two cores they
# are the same speed (docs/tensor-parallelism.md): there the collectives are memory copies and
# sums that compete with the GEMMs for the cores, so running them beside the GEMMs hides
# nothing. Across a link the collectives mostly wait for bytes: `backward` lets the input
# gradients' all-reduces wait beside the weight-gradient GEMMs, `on` also lets two adjacent
# forwards (gpipe's, with --microbatches 2 or more) take turns at their all-reduces.
#
# Prints JSON lines: one per run
#   {"bench":"tp_overlap_two_hosts", "link", "schedule", "microbatches", "tp_overlap", "rep",
#    "step_ms"}
# where step_ms is the median of rank 0's step times after the first (from --metrics), and per
# mode m other than off
#   {"bench":"tp_overlap_two_hosts_ratio", "link", "schedule", "microbatches", "tp_overlap": m,
#    "speedup", "speedup_min", "speedup_max", "ms", "base_ms", "reps"}
# speedup = off / m per rep (each rep runs the three back to back), median and spread; and the
# same for on against backward ("tp_overlap": "on_vs_backward").
#
#   two-hosts-tp-overlap.sh [pipetrain-gpt] [--rate RATE] [--latency MS] [--reps N] [--steps N]
#                           [--schedule NAME] [--microbatches M]
# Defaults: build/examples/pipetrain-gpt, 1gbit, 20ms, 3 reps, 8 steps, 1f1b, M = 1; the GPT of
# the README's row (d_model 256, 4 layers, 4 heads, context 128, batch 16). Needs root (ip netns)
# and mpirun. About 4 minutes at the defaults.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe=$here/../build/examples/pipetrain-gpt
rate=1gbit latency=20ms reps=3 steps=8 schedule=1f1b microbatches=1
while (($#)); do
  case $1 in
    --rate) rate=$2; shift 2 ;;
    --latency) latency=$2; shift 2 ;;
    --reps) reps=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --schedule) schedule=$2; shift 2 ;;
    --microbatches) microbatches=$2; shift 2 ;;
    -h | --help) sed -n '2,27p' "$0"; exit 0 ;;
    *) exe=$1; shift ;;
  esac
done
exe=$(realpath "$exe")
[ -x "$exe" ] || { echo "two-hosts-tp-overlap: $exe not found: build pipetrain-gpt first" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "two-hosts-tp-overlap: mpirun not found" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

two_hosts_per_host=1
source "$here/two-hosts-lib.sh"
work=$(mktemp -d)
trap 'two_hosts_down; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
two_hosts_up "$work" >&2 || { echo "two-hosts-tp-overlap: needs root and ip netns" >&2; exit 1; }
two_hosts_slow_link "$rate" "$latency"
link="veth-tbf-$rate"

# A text both hosts read (they share the file system).
for i in $(seq 1 3000); do
  echo "Line $i: In the beginning God created the heaven and the earth, $((i * 7919 % 1000))."
done > "$work/text.txt"
args=(--d-model 256 --layers 4 --heads 4 --context 128 --batch 16 --tp 2
      --schedule "$schedule" --microbatches "$microbatches"
      --steps "$steps" --eval-every 0 --eval-windows 1 --sample-bytes 0 --threads 1 --timeout 120
      --data "$work/text.txt")

# Each rank writes its own --metrics file (one JSON line per step with tokens_per_s).
cat > "$work/rank.sh" <<EOF
#!/bin/sh
exec "$exe" "\$@" --metrics "$work/metrics-\$OMPI_COMM_WORLD_RANK.jsonl"
EOF
chmod +x "$work/rank.sh"
# The median step time of rank 0's steps after the first (which allocates and warms up).
step_ms() {
  python3 -c '
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "tokens_per_s" in l]
print(round(statistics.median(16 * 128e3 / r["tokens_per_s"] for r in rows[1:]), 2))' "$1"
}

modes=(off backward on)
setup="\"link\": \"$link\", \"schedule\": \"$schedule\", \"microbatches\": $microbatches"
declare -A ms
for rep in $(seq 1 "$reps"); do
  for overlap in "${modes[@]}"; do
    log=$work/$overlap-$rep.txt
    rm -f "$work"/metrics-*.jsonl
    two_hosts_mpirun 600 "$work/rank.sh" "${args[@]}" --tp-overlap "$overlap" >"$log" 2>&1 ||
      { echo "two-hosts-tp-overlap: the run failed:" >&2; tail -20 "$log" >&2; exit 1; }
    step=$(step_ms "$work/metrics-0.jsonl")
    ms[$overlap]+="$step,"
    echo "{\"bench\": \"tp_overlap_two_hosts\", $setup, \"tp_overlap\": \"$overlap\", \"rep\": $rep, \"step_ms\": $step}"
  done
done
python3 - <<EOF
import json, statistics
ms = {"off": [${ms[off]}], "backward": [${ms[backward]}], "on": [${ms[on]}]}
def ratio(mode, base, name):
    r = [b / a for a, b in zip(ms[mode], ms[base])]
    print(json.dumps({"bench": "tp_overlap_two_hosts_ratio", $setup, "tp_overlap": name,
                      "speedup": statistics.median(r), "speedup_min": min(r),
                      "speedup_max": max(r), "ms": statistics.median(ms[mode]),
                      "base_ms": statistics.median(ms[base]), "reps": $reps}))
ratio("backward", "off", "backward")
ratio("on", "off", "on")
ratio("on", "backward", "on_vs_backward")
EOF
