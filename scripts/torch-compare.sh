#!/usr/bin/env bash
# The PyTorch comparison of the Figures (docs/figures.md), in one go: the MLP 784-1024x4-10
# training step (batch 256, SGD momentum 0.9, cross-entropy) in PyTorch and in pipetrain
# (pipetrain-bench-train-step), on 1 and 2 threads, in the same run. Prints JSON lines:
#
#   {"bench":"mlp_step", ...}                        pipetrain's (bench/train_step.cpp's lines)
#   {"bench":"torch_mlp_step", "setting":"tuned"|"shipped", "threads", "torch_version",
#    "step_ms", "samples_per_s" (each + _min, _max), "reps"}
#       tuned: OPENBLAS_CORETYPE=SkylakeX OMP_WAIT_POLICY=PASSIVE (its best figures here: the
#       Debian OpenBLAS does not recognise newer cores and falls back to slow kernels);
#       shipped: neither set. Both with OMP_NUM_THREADS = OPENBLAS_NUM_THREADS = threads.
#   {"bench":"torch_compare", "threads", "pipetrain_samples_per_s", "torch_samples_per_s",
#    "ratio" (pipetrain / torch tuned, medians), "torch_shipped_samples_per_s",
#    "ratio_to_shipped"}
# PyTorch's figures are the median of STEPS timed steps (after 3 warm-up steps) with min and max;
# pipetrain's are its bench's defaults (medians of repetitions, each against its own sgemm).
#
#   scripts/torch-compare.sh [BUILD_DIR] [STEPS]      (defaults: build, 20)
#
# PyTorch is not a dependency of pipetrain: without a python3 that imports torch ($PYTHON,
# python3, /usr/bin/python3 are tried) it says so and exits 0. To compare, install Debian's
# `apt-get install python3-torch libopenblas0-pthread` (without libopenblas0-pthread it falls
# back to the reference BLAS, 50x slower). Run it on a quiet machine.
set -euo pipefail
build=${1:-build}
steps=${2:-20}
exe=$build/bench/pipetrain-bench-train-step
py=""
for cand in ${PYTHON:-} python3 /usr/bin/python3; do
  if command -v "$cand" >/dev/null 2>&1 && "$cand" -c 'import torch' >/dev/null 2>&1; then
    py=$cand
    break
  fi
done
if [ -z "$py" ]; then
  echo "torch-compare: skipped: no python3 with torch (to compare:" \
    "apt-get install python3-torch libopenblas0-pthread)" >&2
  exit 0
fi
[ -x "$exe" ] || {
  echo "torch-compare: $exe not found: build pipetrain-bench-train-step first" >&2
  exit 1
}
lines=$(mktemp)
trap 'rm -f "$lines"' EXIT

# pipetrain's own setting: the torch variables are unset (OMP_WAIT_POLICY would reach oneDNN).
env -u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY "$exe" --threads 1 2 \
  | grep '"mlp_step"' | tee -a "$lines"

# One PyTorch process per (setting, threads): the BLAS reads its variables when it loads.
torch_step() {  # threads setting
  local tuning=(-u OPENBLAS_CORETYPE -u OMP_WAIT_POLICY)
  [ "$2" = tuned ] && tuning=(OPENBLAS_CORETYPE=SkylakeX OMP_WAIT_POLICY=PASSIVE)
  env "${tuning[@]}" OMP_NUM_THREADS="$1" OPENBLAS_NUM_THREADS="$1" \
    "$py" - "$1" "$2" "$steps" <<'PY'
import json, statistics, sys, time
import torch
threads, setting, steps = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(1)
B = 256
layers = [torch.nn.Flatten()]
width = 784
for _ in range(4):
    layers += [torch.nn.Linear(width, 1024), torch.nn.ReLU()]
    width = 1024
layers.append(torch.nn.Linear(width, 10))
model = torch.nn.Sequential(*layers)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
x = torch.rand(B, 1, 28, 28)
y = torch.randint(0, 10, (B,))

def step():
    opt.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    loss.backward()
    opt.step()
    return loss.item()

for _ in range(3):
    step()
times = []
for _ in range(steps):
    t0 = time.perf_counter()
    step()
    times.append(time.perf_counter() - t0)
med, lo, hi = statistics.median(times), min(times), max(times)
print(json.dumps({"bench": "torch_mlp_step", "setting": setting, "threads": threads,
                  "torch_version": torch.__version__, "batch": B,
                  "step_ms": med * 1e3, "step_ms_min": lo * 1e3, "step_ms_max": hi * 1e3,
                  "samples_per_s": B / med, "samples_per_s_min": B / hi,
                  "samples_per_s_max": B / lo, "reps": steps}), flush=True)
PY
}
for t in 1 2; do
  torch_step "$t" tuned | tee -a "$lines"
  torch_step "$t" shipped | tee -a "$lines"
done

"$py" - "$lines" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for t in (1, 2):
    ours = [r for r in rows if r["bench"] == "mlp_step" and r["threads"] == t]
    tuned = [r for r in rows if r["bench"] == "torch_mlp_step" and r["threads"] == t
             and r["setting"] == "tuned"]
    shipped = [r for r in rows if r["bench"] == "torch_mlp_step" and r["threads"] == t
               and r["setting"] == "shipped"]
    if not (ours and tuned and shipped):
        continue
    a, b, c = ours[0]["samples_per_s"], tuned[0]["samples_per_s"], shipped[0]["samples_per_s"]
    print(json.dumps({"bench": "torch_compare", "threads": t, "pipetrain_samples_per_s": a,
                      "torch_samples_per_s": b, "ratio": a / b,
                      "torch_shipped_samples_per_s": c, "ratio_to_shipped": a / c}))
PY
