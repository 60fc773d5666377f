#!/usr/bin/env bash
# The planner's choice against a measured sweep: runs `--plan auto --plan-only` to get the top K
# plans (and the best of each S x R outside them, and one device with all the threads when
# --plan auto weighs it: rank 0), trains each for STEPS steps with its flags, and prints one JSON line per plan
# (predicted and measured ms per step: the median of REPS runs, default 3, with the spread) and a
# last line: the chosen plan's measured time against the measured best of the K
# ("chosen_vs_best" 1.0: the planner chose the fastest).
#
#   scripts/planner-sweep.sh PIPETRAIN_FASHION|PIPETRAIN_GPT [K] [STEPS] [extra flags for every run...]
#   e.g. scripts/planner-sweep.sh build/examples/pipetrain-fashion 6 30 --costs profile
#        scripts/planner-sweep.sh build/examples/pipetrain-gpt 6 40 --costs profile --eval-windows 16
#
# measured_ms is the run's whole training step ("whole training step: X ms", the median wall time
# of train_step over the last full steps: what the prediction models); mean_ms the mean step of
# the whole run (pipetrain-fashion: batch / the samples/s it prints, the first step and data
# batching included; pipetrain-gpt: its training seconds / steps, evaluation excluded);
# last_step_ms the last full step's schedule span from the trace.
# Needs python3 and the Fashion-MNIST data. Run it on a quiet machine.
set -euo pipefail
exe=$1 k=${2:-6} steps=${3:-30}
shift $(($# < 3 ? $# : 3))
reps=${REPS:-3}
devices=cpu:0,cpu:1
lines=$(mktemp)
trap 'rm -f "$lines" "$lines.run"' EXIT
table=$("$exe" --devices "$devices" --plan auto --plan-only --plan-top 1000 "$@")
# The top K, and the best of each S x R the top K leaves out (so every shape is measured).
rows=$(grep -E '^ +[0-9]+ +[0-9.]+ +[0-9.]+% ' <<<"$table" | python3 -c '
import re, sys
k, seen = int(sys.argv[1]), set()
for i, line in enumerate(sys.stdin):
    shape = re.search(r"(\d+ x \d+)", line).group(1)
    if i < k or shape not in seen:
        print(line, end="")
    seen.add(shape)' "$k")
# --plan auto's merged device (one device with all the threads), as rank 0 of the same form.
merged=$(sed -nE 's/^plan auto: one device with all ([0-9]+) threads \(([^)]*)\): best M = ([0-9]+), predicted ([0-9.]+) ms.*/\1 \2 \3 \4/p' <<<"$table")
if [ -n "$merged" ]; then
  read -r mthreads mdevice mM mstep <<<"$merged"
  rows=$(printf '0 %s 0%% - 1 x 1 %s 1f1b never\n%s' "$mstep" "$mM" "$rows")
fi
chosen_rank=1
grep -q '^plan auto chose one device with' <<<"$table" && chosen_rank=0
# REPS rounds over all plans (interleaved, so a slow minute of the machine touches every plan).
for ((rep = 1; rep <= reps; ++rep)); do
  while read -r rank step bubble rest; do
    # rest: "peak MiB per device..." S "x" R M schedule recompute (peaks vary in count)
    read -r -a f <<<"$rest"
    n=${#f[@]}
    recompute=${f[n - 1]} schedule=${f[n - 2]} M=${f[n - 3]} R=${f[n - 4]} S=${f[n - 6]}
    where=(--devices "$devices")
    [ "$rank" = 0 ] && where=(--devices "$mdevice" --threads "$mthreads")
    out=$("$exe" "${where[@]}" --stages "$S" --dp "$R" --microbatches "$M" \
      --schedule "$schedule" --recompute "$recompute" --steps "$steps" --log-every 1000000 "$@")
    printf '%s' "$out" >"$lines.run"  # a file: pipetrain-gpt's samples are not always UTF-8
    python3 - "$rank" "$step" "$S" "$R" "$M" "$schedule" "$recompute" "$lines.run" "${mthreads:-1}" <<'PY'
import json, re, sys
rank, step, S, R, M, schedule, recompute, run = sys.argv[1:9]
out = open(run, encoding="utf-8", errors="replace").read()
t = re.search(r"trained \d+ steps in [0-9.]+ s \(([0-9.]+) samples/s\)", out)
batch = re.search(r", batch (\d+)", out)
if t and batch:
    mean = 1e3 * int(batch.group(1)) / float(t.group(1))
else:  # pipetrain-gpt: "trained N steps in T s (... tokens/s; ...)"
    g = re.search(r"trained (\d+) steps in ([0-9.]+) s \(", out)
    mean = 1e3 * float(g.group(2)) / int(g.group(1))
whole = re.search(r"whole training step: ([0-9.]+) ms", out)
last = re.search(r"last full step \(\d+\): ([0-9.]+) ms measured", out)
print(json.dumps({"rank": int(rank), "threads": int(sys.argv[9]) if rank == "0" else 1,
                  "stages": int(S), "replicas": int(R), "microbatches": int(M),
                  "schedule": schedule, "recompute": recompute, "predicted_ms": float(step),
                  "measured_ms": float(whole.group(1)) if whole else round(mean, 2),
                  "mean_ms": round(mean, 2),
                  "last_step_ms": float(last.group(1)) if last else None}))
PY
  done <<<"$rows"
done >"$lines"
python3 - "$reps" "$lines" "$chosen_rank" <<'PY'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[2])]
plans = {}
for r in runs:
    plans.setdefault(r["rank"], []).append(r)
rows = []
for rank in sorted(plans):
    rs = plans[rank]
    row = dict(rs[0])
    for key in ("measured_ms", "mean_ms", "last_step_ms"):
        values = [r[key] for r in rs if r[key] is not None]
        row[key] = round(statistics.median(values), 2) if values else None
    row["measured_min_ms"] = min(r["measured_ms"] for r in rs)
    row["measured_max_ms"] = max(r["measured_ms"] for r in rs)
    row["reps"] = len(rs)
    rows.append(row)
    print(json.dumps(row))
best = min(rows, key=lambda r: r["measured_ms"])
chosen = next(r for r in rows if r["rank"] == int(sys.argv[3]))
print(json.dumps({"summary": True, "plans": len(rows), "reps": int(sys.argv[1]),
                  "chosen_rank": chosen["rank"], "chosen_measured_ms": chosen["measured_ms"],
                  "best_rank": best["rank"], "best_measured_ms": best["measured_ms"],
                  "chosen_vs_best": round(chosen["measured_ms"] / best["measured_ms"], 3),
                  "chosen_predicted_vs_measured": round(chosen["predicted_ms"] / chosen["measured_ms"], 3)}))
PY
