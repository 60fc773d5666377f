#!/usr/bin/env bash
# Soak: long runs that must not leak. Trains
#   1. the Fashion-MNIST MLP for 10,000 steps with --stages 2 --dp 2 in one process (4 virtual CPU
#      devices; batch 64 in 4 micro-batches, so that it takes minutes, not an hour), and
#   2. the GPT (context 128, d 256, 4 layers) for 2,000 steps with --stages 2,
# with --metrics, whose step lines carry the process's resident memory (rss_bytes) and the bytes
# the devices' caching allocators hold from the system (reserved_bytes). Then checks:
#   - reserved device bytes settle within the first third of the run and stay flat after (the
#     cache serves every step; what grows late is a tensor kept alive somewhere). They do grow
#     before that: at the first epoch ends, the test-set evaluation and the short last batch add
#     size classes to the cache (the MLP: 97 MB -> 163 MB over the first 3 epoch ends, then
#     flat), and with the all-reduce on its own thread how many blocks are live at once depends
#     on timing, so the cache can still gain a block or two;
#   - resident memory: from the median over the 10% of the steps after reserved bytes settled to
#     the largest value in the last 10%, growth is at most 1%.
# One JSON line per run with the figures; exit 1 when a run fails a check. Not in CI (about
# 10-20 minutes on 2 cores).
#
#   scripts/soak.sh [BUILD_DIR] [OUT_DIR]      (defaults: build, a temporary folder)
#   SOAK_MLP_STEPS=10000 SOAK_GPT_STEPS=2000   (override for a quicker look)
#   SOAK_ONLY=mlp|gpt                          (one of the two runs)
set -euo pipefail
build=${1:-build}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
mlp_steps=${SOAK_MLP_STEPS:-10000}
gpt_steps=${SOAK_GPT_STEPS:-2000}

echo "soak: MLP $mlp_steps steps (--stages 2 --dp 2), GPT $gpt_steps steps (--stages 2); output in $out" >&2
runs=()
if [[ ${SOAK_ONLY:-mlp} == mlp ]]; then
  runs+=("$out/mlp.jsonl")
  "$build/examples/pipetrain-fashion" --devices cpu:0..3 --stages 2 --dp 2 --microbatches 2 \
    --batch 64 --steps "$mlp_steps" --log-every 1000 --metrics "$out/mlp.jsonl" > "$out/mlp.txt" 2>&1 \
    || { echo "soak: the MLP run failed:" >&2; tail -20 "$out/mlp.txt" >&2; exit 1; }
fi
if [[ ${SOAK_ONLY:-gpt} == gpt ]]; then
  runs+=("$out/gpt.jsonl")
  # Validation every 250 steps: the evaluations' buffers join the cache at the first ones, so
  # the run needs several to show the steady state.
  "$build/examples/pipetrain-gpt" --stages 2 --microbatches 2 --steps "$gpt_steps" --eval-every 250 \
    --log-every 200 --sample-bytes 0 --metrics "$out/gpt.jsonl" > "$out/gpt.txt" 2>&1 \
    || { echo "soak: the GPT run failed:" >&2; tail -20 "$out/gpt.txt" >&2; exit 1; }
fi

python3 - "${runs[@]}" <<'PY'
import json, statistics, sys

failed = False
for path in sys.argv[1:]:
    steps = [json.loads(line) for line in open(path)]
    steps = [s for s in steps if "rss_bytes" in s]
    n = len(steps)
    tenth = max(1, n // 10)
    changes = [s["step"] for a, s in zip(steps, steps[1:])
               if s["reserved_bytes"] != a["reserved_bytes"]]
    settled = next(i for i, s in enumerate(steps) if not changes or s["step"] >= changes[-1])
    base = statistics.median(s["rss_bytes"] for s in steps[settled:settled + tenth])
    end = max(s["rss_bytes"] for s in steps[n - tenth:])
    growth = (end - base) / base
    reserved_settled = settled <= n // 3
    ok = growth <= 0.01 and reserved_settled
    failed |= not ok
    print(json.dumps({
        "bench": "soak", "run": path.rsplit("/", 1)[-1].split(".")[0], "steps": n,
        "reserved_settled_at_step": steps[settled]["step"],
        "reserved_changes_at_steps": changes,
        "reserved_mb": [round(steps[0]["reserved_bytes"] / 2**20, 2),
                        round(steps[-1]["reserved_bytes"] / 2**20, 2)],
        "rss_mb_after_settling": round(base / 2**20, 1), "rss_mb_at_end": round(end / 2**20, 1),
        "rss_growth_percent": round(100 * growth, 3),
        "rss_mb_max": round(max(s["rss_bytes"] for s in steps) / 2**20, 1),
        "ok": ok}))
sys.exit(1 if failed else 0)
PY
