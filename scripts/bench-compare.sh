#!/usr/bin/env bash
# Compares the training-step and pipeline benchmarks of two builds in one run (for a refactoring
# that must not slow anything down): the two builds' programs run alternately, REPS times each, and
# the script prints one JSON line per measurement with the median and spread of each build's step
# time (over the REPS runs of each; a run's step_ms is itself the median of its timed steps) and
# the ratio new/old of the medians (< 1: the new build is faster).
#
#   scripts/bench-compare.sh OLD_BUILD_DIR NEW_BUILD_DIR [REPS]
#
# Each build dir must hold bench/pipetrain-bench-train-step and bench/pipetrain-bench-pipeline.
# Needs python3 (for the medians). Run it on a quiet machine.
set -euo pipefail
old=$1 new=$2 reps=${3:-7}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < reps; r++)); do
  for side in old new; do
    dir=${!side}
    "$dir/bench/pipetrain-bench-train-step" --threads 1 --steps 20 | grep '"mlp_step"' \
      | sed "s/^/$side train_step_1t /" >>"$out/lines"
    "$dir/bench/pipetrain-bench-train-step" --threads 2 --steps 20 | grep '"mlp_step"' \
      | sed "s/^/$side train_step_2t /" >>"$out/lines"
    "$dir/bench/pipetrain-bench-pipeline" --microbatches 8 --schedules gpipe,1f1b,zb-h1 --steps 10 \
      | grep '"bench": "pipeline",' | sed "s/^/$side pipeline /" >>"$out/lines"
  done
done
python3 - "$out/lines" <<'PY'
import json, statistics, sys
runs = {}
for line in open(sys.argv[1]):
    side, kind, text = line.split(" ", 2)
    rec = json.loads(text)
    key = kind if kind != "pipeline" else f"pipeline_{rec['schedule']}_m{rec['microbatches']}"
    runs.setdefault(key, {"old": [], "new": []})[side].append(rec["step_ms"])
for key, sides in runs.items():
    m = {s: statistics.median(v) for s, v in sides.items()}
    print(json.dumps({"bench": "compare", "what": key, "reps": len(sides["new"]),
                      "old_median_ms": round(m["old"], 3), "old_min_max_ms": [min(sides["old"]), max(sides["old"])],
                      "new_median_ms": round(m["new"], 3), "new_min_max_ms": [min(sides["new"]), max(sides["new"])],
                      "new_over_old": round(m["new"] / m["old"], 4)}))
PY
