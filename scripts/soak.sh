#!/usr/bin/env bash
# Soak: long runs that must not leak. Trains
#   1. the Fashion-MNIST MLP for 10,000 steps with --stages 2 --dp 2 in one process (4 virtual CPU
#      devices; batch 64 in 4 micro-batches, so that it takes minutes, not an hour), and
#   2. the GPT (context 128, d 256, 4 layers) for 2,000 steps with --stages 2,
# with --metrics, whose step lines carry the process's resident memory (rss_bytes) and the bytes
# the devices' caching allocators hold from the system (reserved_bytes). Then checks, after a
# warm-up of the first 10% of the steps:
#   - resident memory: the largest value in the last 10% of the steps is at most 1% above the
#     median of the 10% right after warm-up;
#   - reserved device bytes: the same value at every step after warm-up (the cache serves
#     every step's activations; growth means a tensor is kept alive somewhere). In the first
#     steps it may still grow by a block or two: with the gradient all-reduce on its own thread,
#     how many blocks are live at once depends on timing, and the cache settles at the largest.
# One JSON line per run with the figures; exit 1 when a run fails a check. Not in CI (about
# 10-20 minutes on 2 cores).
#
#   scripts/soak.sh [BUILD_DIR] [OUT_DIR]      (defaults: build, a temporary folder)
#   SOAK_MLP_STEPS=10000 SOAK_GPT_STEPS=2000   (override for a quicker look)
set -euo pipefail
build=${1:-build}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
mlp_steps=${SOAK_MLP_STEPS:-10000}
gpt_steps=${SOAK_GPT_STEPS:-2000}

echo "soak: MLP $mlp_steps steps (--stages 2 --dp 2), GPT $gpt_steps steps (--stages 2); output in $out" >&2
"$build/examples/pipetrain-fashion" --devices cpu:0..3 --stages 2 --dp 2 --microbatches 2 \
  --batch 64 --steps "$mlp_steps" --log-every 1000 --metrics "$out/mlp.jsonl" > "$out/mlp.txt" 2>&1 \
  || { echo "soak: the MLP run failed:" >&2; tail -20 "$out/mlp.txt" >&2; exit 1; }
"$build/examples/pipetrain-gpt" --stages 2 --microbatches 2 --steps "$gpt_steps" --eval-every 500 \
  --log-every 200 --sample-bytes 0 --metrics "$out/gpt.jsonl" > "$out/gpt.txt" 2>&1 \
  || { echo "soak: the GPT run failed:" >&2; tail -20 "$out/gpt.txt" >&2; exit 1; }

python3 - "$out/mlp.jsonl" "$out/gpt.jsonl" <<'PY'
import json, statistics, sys

failed = False
for path in sys.argv[1:]:
    steps = [json.loads(line) for line in open(path)]
    steps = [s for s in steps if "rss_bytes" in s]
    n = len(steps)
    warm = max(1, n // 10)
    after = steps[warm:]
    base = statistics.median(s["rss_bytes"] for s in steps[warm:2 * warm])
    end = max(s["rss_bytes"] for s in steps[n - warm:])
    growth = (end - base) / base
    reserved = sorted({s["reserved_bytes"] for s in after})
    ok = growth <= 0.01 and len(reserved) == 1
    failed |= not ok
    print(json.dumps({
        "bench": "soak", "run": path.rsplit("/", 1)[-1].split(".")[0], "steps": n,
        "warmup_steps": warm, "rss_mb_after_warmup": round(base / 2**20, 1),
        "rss_mb_at_end": round(end / 2**20, 1), "rss_growth_percent": round(100 * growth, 3),
        "rss_mb_max": round(max(s["rss_bytes"] for s in steps) / 2**20, 1),
        "reserved_mb_after_warmup": [round(r / 2**20, 2) for r in reserved],
        "reserved_changes_at_steps": [s["step"] for a, s in zip(steps, steps[1:])
                                      if s["reserved_bytes"] != a["reserved_bytes"]],
        "ok": ok}))
sys.exit(1 if failed else 0)
PY
