#!/usr/bin/env bash
# llm.c beside pipetrain-gpt on one GPU (issue 36): karpathy/llm.c's CUDA trainer (train_gpt2cu,
# bf16, cuDNN flash attention) and pipetrain-gpt train GPT-2 124M (d 768, 12 layers, 12 heads,
# vocab 50257 padded to 50304, T 1024, micro-batch 16, AdamW) from random init on the same random
# tokens, one after the other in the same device call, and each prints a JSON line.
#
#   bash scripts/llmc-peer.sh prepare [--peers DIR] [--force]   here (no GPU): copy, patch, build
#   bash scripts/llmc-peer.sh check [run's flags]              here (no GPU): the dry run
#   bash scripts/llmc-peer.sh run [--ours BIN] [--out DIR] [--steps N] [--warmup K] [--batch B]
#                                 [--budget S]                  on the GPU machine
#
# prepare  copies ../shared/peers/llm.c (unmodified upstream, MIT) and the cuDNN frontend headers
#          into .peers/src/ (ignored by git; nothing of llm.c is tracked in this project), applies
#          scripts/llmc-cuda13.patch (CUDA 13: see its header), builds train_gpt2cu with
#            make train_gpt2cu USE_CUDNN=1 CUDNN_FRONTEND_PATH=cudnn-frontend/include
#              NO_MULTI_GPU=1 NO_USE_MPI=1 PRECISION=BF16 GPU_COMPUTE_CAPABILITY=90
#          (under flock /tmp/pipetrain-build.lock) and puts the binary and BUILD.txt (commits,
#          patch, nvcc, size, ldd) into .peers/bin/: carry `.peers/bin` to the GPU machine (3.4
#          MiB; ../shared does not travel). It loads cuDNN 9, cuBLASLt 13 and NVRTC 13 (from the
#          toolkit's lib64, else the Python wheels); the CUDA runtime is linked statically.
# check    runs without a GPU: the binary is there, its libraries resolve (with the LD_LIBRARY_PATH
#          `run` would use), a tiny token file is written and its header checked (and read by
#          pipetrain-gpt on the CPU when that build has --data), and the commands `run` would
#          run are printed.
# run      writes the token files on the GPU machine (nothing large travels): train with
#          (steps + 1) * B * T + 1 and val with B * T + 1 random tokens below 50257 (fixed seed),
#          in llm.c's format (256 int32 header: 20240520, 1, count; then uint16 tokens). Then
#          llm.c (-e d12 -b B -t 1024 -x steps, validation only at the first and last step on one
#          batch: -v 1000000 -m 1; no sampling -s 0, checkpoints -n 0 or log dir; otherwise its
#          defaults: GELU recomputed -r 1, fp32 master weights, lr 3e-4, clip 1, no weight decay),
#          then pipetrain-gpt (--devices cuda:0 --precision bf16, the same shape, --data TRAIN
#          --vocab 50257, the same lr, clip and weight decay, evaluation only at the end on 16
#          windows, no sample, --metrics for the per-step figures). Prints:
#   {"bench":"llmc_peer","program":"llm.c"|"pipetrain", "device", "batch", "context", "steps"
#    (measured), "warmup_steps", "ms_per_step" (+ _min, _max), "tokens_per_s" (+ _min, _max),
#    "mfu" (+ "mfu_reported" by llm.c itself), "params", "flops_per_token", "peak_tflops",
#    "peak_source", "peak_mem_mib", "peak_mem_source", "final_loss", "flags", "status"; llm.c
#    adds "llmc_device_memory_usage_mib" (its own line), pipetrain "reserved_mib_max" (the
#    allocator's) and "pipetrain_param_count_printed" (as it prints it, each layer's sum)}
#   {"bench":"llmc_peer","program":"ratio", "tokens_per_s" (pipetrain / llm.c), "mfu_pipetrain",
#    "mfu_llmc", "peak_mem" (pipetrain / llm.c), "targets": {tokens/s >= 1.0x, MFU >= 0.45,
#    memory <= 1.2x}}
#          Medians over the measured steps (after --warmup), with min and max. tokens/s = B * T /
#          step time. MFU for both by llm.c's formula (gpt2_estimate_mfu: 6 N + 6 L C T FLOPs per
#          token, N = llm.c's parameter count, 124,475,904) over llm.c's peak (llmc/mfu.h, as it
#          prints it: 988.9 TFLOP/s bf16 for the H100 SXM); mfu.h does not know the H200: there
#          989 TFLOP/s, the datasheet's dense bf16, as peak_source says. Peak memory: nvidia-smi's
#          memory.used sampled every 50 ms while each program runs, its maximum minus the idle
#          value before it (the same measure for both; llm.c's own "device memory usage" line
#          and our allocator's largest reserved_bytes are added beside it).
#          Time: about 1-2 minutes on an H100/H200; --budget (default 270 s) bounds the whole
#          run, each program gets at most what is left. Exit 0: both ran; 77: no GPU; 1: else.
#
# $LLMC_ARGS and $OURS_ARGS add flags to either program (word-split).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 1
dot=$root/.peers
bin=${LLMC_BIN:-$dot/bin/train_gpt2cu}  # $LLMC_BIN: another train_gpt2cu (tests)
patch_file=$root/scripts/llmc-cuda13.patch
vocab=50257

die() { echo "llmc-peer: $*" >&2; exit 1; }
usage() { sed -n '7,10p' "$0" | sed 's/^#//' >&2; exit 2; }

# ---- helpers in Python (token files, parsing, JSON) ----------------------------------------
read -r -d '' helper <<'PY'
import json, math, re, statistics, struct, sys
from array import array

MAGIC, VERSION, HEADER_INTS = 20240520, 1, 256

def write_tokens(path, count, seed, vocab):
    import random
    rng = random.Random(seed)
    header = array("i", [0] * HEADER_INTS)
    header[0], header[1], header[2] = MAGIC, VERSION, count
    tokens = array("H", (rng.randrange(vocab) for _ in range(count)))
    if sys.byteorder != "little":  # llm.c's files are little-endian
        header.byteswap(); tokens.byteswap()
    with open(path, "wb") as f:
        header.tofile(f)
        tokens.tofile(f)

def check_tokens(path, vocab):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < HEADER_INTS * 4:
        sys.exit(f"{path}: {len(data)} bytes, shorter than the 1024-byte header")
    magic, version, count = struct.unpack_from("<3i", data)
    if magic != MAGIC or version != VERSION:
        sys.exit(f"{path}: magic {magic} version {version}, want {MAGIC} {VERSION}")
    if len(data) != HEADER_INTS * 4 + 2 * count:
        sys.exit(f"{path}: {len(data)} bytes, the header's {count} tokens need "
                 f"{HEADER_INTS * 4 + 2 * count}")
    tokens = array("H", data[HEADER_INTS * 4:])
    if sys.byteorder != "little":
        tokens.byteswap()
    top = max(tokens)
    if top >= vocab:
        sys.exit(f"{path}: token {top} >= vocab {vocab}")
    print(f"{path}: magic {magic}, version {version}, {count} tokens, max id {top} < {vocab}, "
          f"{len(data)} bytes: ok")

def read(path):
    try:
        return open(path, errors="replace").read() if path else ""
    except OSError:
        return ""

def spread(values):
    return statistics.median(values), min(values), max(values)

def peak_mem(samples_path, idle):
    try:
        vals = [int(l.strip()) for l in open(samples_path) if l.strip().isdigit()]
    except OSError:
        vals = []
    if not vals or idle is None:
        return None
    return max(vals) - idle

def llmc_params(log):
    m = re.search(r"^num_parameters: (\d+)", log, re.M)
    return int(m.group(1)) if m else None

def gpt2_params(C=768, L=12, Vp=50304, maxT=1024):  # llm.c's count for -e d12
    return Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C

def peak_of(device, log):
    m = re.search(r"^\| peak TFlops\s+\|\s*(-?[\d.]+)", log, re.M)
    if m and float(m.group(1)) > 0:
        return float(m.group(1)), "llm.c's llmc/mfu.h for this GPU, as llm.c printed it"
    if device and "H200" in device:
        return 989.0, ("989 TFLOP/s, the H200 datasheet's dense bf16 (llmc/mfu.h does not know "
                       "the H200)")
    if device and "H100 80GB HBM3" in device:
        return 988.9, "llm.c's llmc/mfu.h for the H100 SXM (HOPPER 756 x 528/456 x 1830/1620)"
    return None, f"unknown GPU {device!r}: not in llmc/mfu.h, no datasheet peak here"

def summarize(a):
    B, T, warm = int(a["batch"]), int(a["context"]), int(a["warmup"])
    idle = lambda k: int(a[k]) if a.get(k, "").isdigit() else None
    mem_source = ("nvidia-smi memory.used every 50 ms, max during the run minus idle before it"
                  if a.get("llmc_idle", "").isdigit() else "none (no nvidia-smi)")
    llog = read(a.get("llmc_log"))
    device = a.get("device") or None
    m = re.search(r"^\| device\s+\|\s*(.*?)\s*\|$", llog, re.M)
    if m:
        device = m.group(1)
    N = llmc_params(llog) or gpt2_params()
    L, C = 12, 768
    flops_per_token = 6 * N + 6 * L * C * T  # gpt2_estimate_mfu
    peak, peak_source = peak_of(device, llog)
    mfu = lambda tps: tps * flops_per_token / (peak * 1e12) if peak else None
    common = {"device": device, "batch": B, "context": T,
              "warmup_steps": warm, "params": N, "flops_per_token": flops_per_token,
              "peak_tflops": peak, "peak_source": peak_source, "peak_mem_source": mem_source}
    out, failed = {}, []

    def emit(program, rc, ms, extra):
        row = {"bench": "llmc_peer", "program": program, **common}
        if rc != "0":
            failed.append(program)
        ms = ms[warm:]
        if not ms:
            row.update(**extra, status="skipped (no time left in --budget)" if rc == "skipped"
                       else f"failed (exit {rc}, no measured step)" if rc != "0"
                       else "failed (no measured step)")
        else:
            med, lo, hi = spread(ms)
            tps = B * T * 1000 / med
            row.update(steps=len(ms), ms_per_step=round(med, 3), ms_per_step_min=round(lo, 3),
                       ms_per_step_max=round(hi, 3), tokens_per_s=round(tps),
                       tokens_per_s_min=round(B * T * 1000 / hi),
                       tokens_per_s_max=round(B * T * 1000 / lo),
                       mfu=None if mfu(tps) is None else round(mfu(tps), 4), **extra,
                       status="passed" if rc == "0" else f"failed (exit {rc})")
            out[program] = row
        print(json.dumps(row), flush=True)

    # llm.c: "step    6/30 | loss ... | lr ... | 45.12 ms | 52.3% bf16 MFU | 363112 tok/s"
    step_re = re.compile(r"^step\s+(\d+)/(\d+) \| loss (\S+) .*\| ([\d.]+) ms \| (-?[\d.]+)% "
                         r"\w+ MFU \| ([\d.]+) tok/s", re.M)
    steps = step_re.findall(llog)
    ms = [float(s[3]) for s in steps]
    rep = [float(s[4]) / 100 for s in steps][warm:]
    used = re.search(r"^device memory usage: (\d+) MiB", llog, re.M)
    emit("llm.c", a["llmc_rc"], ms, {
        "mfu_reported": round(statistics.median(rep), 4) if rep and min(rep) >= 0 else None,
        "peak_mem_mib": peak_mem(a["llmc_mem"], idle("llmc_idle")),
        "llmc_device_memory_usage_mib": int(used.group(1)) if used else None,
        "final_loss": float(steps[-1][2]) if steps else None,
        "flags": a.get("llmc_flags")})

    rows, reserved, loss = [], [], None
    for line in read(a.get("ours_metrics")).splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if "event" not in r and "tokens_per_s" in r and "step" in r:
            rows.append(r)
    rows.sort(key=lambda r: r["step"])
    ours_ms = [B * T * 1000 / r["tokens_per_s"] for r in rows if r["tokens_per_s"] > 0]
    reserved = [r.get("reserved_bytes", 0) for r in rows]
    olog = read(a.get("ours_log"))
    m = re.search(r"; (\d+) parameters\)", olog)
    emit("pipetrain", a["ours_rc"], ours_ms, {
        "peak_mem_mib": peak_mem(a["ours_mem"], idle("ours_idle")),
        "reserved_mib_max": round(max(reserved) / 2**20, 1) if reserved else None,
        "final_loss": rows[-1].get("loss") if rows else None,
        "pipetrain_param_count_printed": int(m.group(1)) if m else None,
        "flags": a.get("ours_flags")})

    if "llm.c" in out and "pipetrain" in out:
        l, o = out["llm.c"], out["pipetrain"]
        ratio = o["tokens_per_s"] / l["tokens_per_s"]
        mem = (o["peak_mem_mib"] / l["peak_mem_mib"]
               if o["peak_mem_mib"] and l["peak_mem_mib"] else None)
        print(json.dumps({"bench": "llmc_peer", "program": "ratio", "device": device,
                          "tokens_per_s": round(ratio, 4), "mfu_pipetrain": o["mfu"],
                          "mfu_llmc": l["mfu"],
                          "peak_mem": None if mem is None else round(mem, 3),
                          "targets": {"tokens_per_s_ge_1": ratio >= 1.0,
                                      "mfu_ge_0.45": None if o["mfu"] is None
                                      else o["mfu"] >= 0.45,
                                      "peak_mem_le_1.2": None if mem is None else mem <= 1.2}}),
              flush=True)
    return 0 if len(out) == 2 and not failed else 1

cmd = sys.argv[1]
if cmd == "tokens":
    write_tokens(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
elif cmd == "check":
    check_tokens(sys.argv[2], int(sys.argv[3]))
elif cmd == "summarize":
    sys.exit(summarize(dict(kv.split("=", 1) for kv in sys.argv[2:])))
else:
    sys.exit(f"unknown helper command {cmd}")
PY
py() { python3 -c "$helper" "$@"; }

# ---- the libraries train_gpt2cu needs (cuDNN, cuBLASLt, NVRTC) -----------------------------
# The toolkit's lib64 first; whatever is still missing from the Python wheels (nvidia-cudnn-cu13,
# nvidia-cublas), as tests/gpu-check.sh's cuda_library finds cuDNN.
missing_libs() { ldd "$1" 2>/dev/null | awk '/not found/ {print $1}'; }
library_path() {  # binary
  local dir module sub
  local cuda=${CUDA_HOME:-/usr/local/cuda}
  for dir in "$cuda/lib64" "$cuda/targets/x86_64-linux/lib"; do
    [[ -d $dir && :${LD_LIBRARY_PATH:-}: != *:$dir:* ]] &&
      export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$dir
  done
  [[ -z $(missing_libs "$1") ]] && return
  for module in nvidia.cudnn nvidia.cublas nvidia.cuda_nvrtc nvidia.cu13 nvidia.cuda_runtime; do
    dir=$(python3 -c "import $module as m; print(m.__path__[0])" 2>/dev/null) || continue
    for sub in lib lib64; do
      if compgen -G "$dir/$sub/lib*.so*" >/dev/null; then
        echo "llmc-peer: libraries from the Python wheel $module: $dir/$sub" >&2
        export LD_LIBRARY_PATH=$dir/$sub${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
      fi
    done
  done
}
ldd_summary() {  # binary
  ldd "$1" 2>&1 | grep -E "cudnn|cublas|cudart|nvrtc|nvidia-ml|not found" | sed 's/^\s*/  /'
}

find_ours() {  # the pipetrain-gpt to run: --ours, else build-gpu's, else build's
  local c
  for c in "$@" "$root/build-gpu/examples/pipetrain-gpt" "$root/build/examples/pipetrain-gpt"; do
    [[ -n $c && -x $c ]] && { echo "$c"; return; }
  done
}

# ---- prepare -------------------------------------------------------------------------------
prepare() {
  local peers=$root/../shared/peers force=0
  while (($#)); do
    case $1 in
      --peers) peers=$2; shift 2 ;;
      --force) force=1; shift ;;
      *) usage ;;
    esac
  done
  [[ -f $peers/llm.c/train_gpt2.cu && -f $peers/cudnn-frontend/include/cudnn_frontend.h ]] ||
    die "no llm.c and cuDNN frontend under $peers (want llm.c/train_gpt2.cu," \
      "cudnn-frontend/include/cudnn_frontend.h)"
  export PATH=${CUDA_HOME:-/usr/local/cuda}/bin:$PATH
  command -v nvcc >/dev/null || die "nvcc not found (CUDA_HOME or /usr/local/cuda/bin)"
  local make_args=(train_gpt2cu USE_CUDNN=1 CUDNN_FRONTEND_PATH=cudnn-frontend/include
    NO_MULTI_GPU=1 NO_USE_MPI=1 PRECISION=BF16 GPU_COMPUTE_CAPABILITY=90)
  local nvcc_version inputs
  nvcc_version=$(nvcc --version | tail -1)
  inputs="llm.c $(cat "$peers/llm.c/COMMIT" 2>/dev/null || echo '?'), cudnn-frontend"
  inputs+=" $(cat "$peers/cudnn-frontend/COMMIT" 2>/dev/null || echo '?'),"
  inputs+=" patch $(sha256sum "$patch_file" | cut -c1-16), $nvcc_version, make ${make_args[*]}"
  if ((!force)) && [[ -x $bin ]] &&
    grep -qxF "inputs: $inputs" "$dot/bin/BUILD.txt" 2>/dev/null; then
    echo "llmc-peer: $bin is up to date ($(du -h "$bin" | cut -f1)); --force rebuilds"
    return
  fi
  local src=$dot/src/llm.c
  rm -rf "${dot:?}/src" "${dot:?}/bin"
  mkdir -p "$dot/src" "$dot/bin"
  cp -r "$peers/llm.c" "$src"
  # The Makefile insists on ./cudnn-frontend/include (or ~/cudnn-frontend/include) even when
  # CUDNN_FRONTEND_PATH is given: the headers go inside the copy.
  mkdir -p "$src/cudnn-frontend"
  cp -r "$peers/cudnn-frontend/include" "$src/cudnn-frontend/include"
  patch -p1 -d "$src" --forward --quiet <"$patch_file" || die "$patch_file does not apply"
  echo "llmc-peer: building $src: make ${make_args[*]} (log: $dot/build.log)"
  local lock=()
  command -v flock >/dev/null && lock=(flock /tmp/pipetrain-build.lock)
  local t0=$SECONDS
  if ! (cd "$src" && "${lock[@]}" make "${make_args[@]}") >"$dot/build.log" 2>&1; then
    grep -E "error|Error" "$dot/build.log" | head -20
    die "make failed: $dot/build.log"
  fi
  cp "$src/train_gpt2cu" "$bin"
  local size
  size=$(stat -c %s "$bin")
  {
    echo "train_gpt2cu: karpathy/llm.c (MIT), built by scripts/llmc-peer.sh prepare"
    echo "inputs: $inputs"
    echo "size: $size bytes"
    echo "ldd (on the build machine):"
    ldd_summary "$bin"
  } >"$dot/bin/BUILD.txt"
  cat "$dot/bin/BUILD.txt"
  echo "llmc-peer: built in $((SECONDS - t0)) s; carry .peers/bin ($(du -sh "$dot/bin" | cut -f1))"
  ((size < 48 << 20)) || echo "llmc-peer: warning: the binary is $((size >> 20)) MiB, much of" \
    "the 64 MiB carry budget" >&2
}

# ---- commands of a run ---------------------------------------------------------------------
steps=30 warmup=5 batch=16 context=1024 budget=270 ours_arg="" out=${OUT:-}
run_args() {
  while (($#)); do
    case $1 in
      --ours) ours_arg=$2; shift 2 ;;
      --out) out=$2; shift 2 ;;
      --steps) steps=$2; shift 2 ;;
      --warmup) warmup=$2; shift 2 ;;
      --batch) batch=$2; shift 2 ;;
      --budget) budget=$2; shift 2 ;;
      *) usage ;;
    esac
  done
  [[ $steps =~ ^[0-9]+$ && $warmup =~ ^[0-9]+$ && $batch =~ ^[0-9]+$ && $budget =~ ^[0-9]+$ ]] ||
    die "--steps, --warmup, --batch and --budget take whole numbers"
  ((steps > warmup)) || die "--steps $steps must be above --warmup $warmup"
}
llmc_cmd() {  # train val
  # -v: validation every 1e6 steps, i.e. only at step 0 and the last (on -m 1 batch; outside the
  # timed steps); -s 0: no sampling; -n 0 and no -o: no checkpoint, no log; -e d12: random init.
  # ($LLMC_ARGS is word-split on purpose.)
  # shellcheck disable=SC2206
  cmd=("$bin" -e d12 -i "$1" -j "$2" -b "$batch" -t "$context" -x "$steps" -v 1000000 -m 1
    -s 0 -n 0 ${LLMC_ARGS:-})
}
ours_cmd() {  # exe train metrics
  # shellcheck disable=SC2206
  cmd=("$1" --devices cuda:0 --precision bf16 --context "$context" --d-model 768 --layers 12
    --heads 12 --batch "$batch" --steps "$steps" --data "$2" --data-format llmc --vocab "$vocab"
    --optim adamw --lr 3e-4 --clip 1 --weight-decay 0 --eval-every 0 --eval-windows 16
    --sample-bytes 0 --log-every "$steps"
    --metrics "$3" ${OURS_ARGS:-})
}

# ---- check (dry run, no GPU) ---------------------------------------------------------------
check() {
  run_args "$@"
  local ok=1 ours
  echo "== llm.c binary"
  if [[ -x $bin ]]; then
    echo "$bin: $(stat -c %s "$bin") bytes"
    [[ -f $dot/bin/BUILD.txt ]] && grep '^inputs:' "$dot/bin/BUILD.txt"
    library_path "$bin"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    ldd_summary "$bin"
    if [[ -n $(missing_libs "$bin") ]]; then
      echo "missing libraries: $(missing_libs "$bin" | xargs)"
      ok=0
    fi
  else
    echo "$bin is missing: run scripts/llmc-peer.sh prepare"
    ok=0
  fi
  echo "== token files"
  command -v python3 >/dev/null || die "python3 is needed (token files, parsing)"
  work=$(mktemp -d)  # global: the EXIT trap removes it
  trap 'rm -rf "$work"' EXIT
  py tokens "$work/tiny.bin" 4097 1 "$vocab" && py check "$work/tiny.bin" "$vocab" || ok=0
  # A wrong file must be refused by the checker too.
  py tokens "$work/bad.bin" 10 1 "$vocab" && truncate -s -2 "$work/bad.bin"
  if py check "$work/bad.bin" "$vocab" 2>/dev/null; then
    echo "the checker took a truncated file"
    ok=0
  else
    echo "a truncated file is refused: ok"
  fi
  ours=$(find_ours "$ours_arg")
  if [[ -n $ours ]] && "$ours" --help 2>/dev/null | grep -q -- "--vocab"; then
    echo "== $ours reads the tiny file (CPU, 1 step of a tiny model)"
    if "$ours" --devices cpu:0 --data "$work/tiny.bin" --vocab "$vocab" --context 16 \
      --d-model 32 --layers 1 --heads 2 --batch 2 --steps 1 --eval-windows 1 --sample-bytes 0 \
      >"$work/ours.log" 2>&1; then
      grep -E "^pipetrain-gpt:|validation loss" "$work/ours.log" | head -3
    else
      tail -5 "$work/ours.log"
      ok=0
    fi
  else
    echo "== no pipetrain-gpt with --data/--vocab found (build/ or build-gpu/): not tried"
  fi
  echo "== run would do (steps $steps, warm-up $warmup, batch $batch, T $context," \
    "budget $budget s)"
  local train=TMP/train.bin val=TMP/val.bin
  echo "tokens: $train $(((steps + 1) * batch * context + 1)), $val $((batch * context + 1))"
  llmc_cmd "$train" "$val"
  echo "llm.c: ${cmd[*]}"
  ours_cmd "${ours:-build-gpu/examples/pipetrain-gpt}" "$train" OUT/pipetrain-metrics.jsonl
  echo "pipetrain: ${cmd[*]}"
  echo "peak memory: nvidia-smi --query-gpu=memory.used -lms 50 around each"
  if ((ok)); then echo "check passed"; else echo "check FAILED"; return 1; fi
}

# ---- run (GPU) -----------------------------------------------------------------------------
mem_pid="" mem_idle=""
mem_start() {  # samples-file: sets mem_idle (MiB in use before) and starts the sampler
  mem_pid="" mem_idle=""
  rm -f "$1"
  command -v nvidia-smi >/dev/null || return 0
  mem_idle=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 2>/dev/null |
    head -1)
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i 0 -lms 50 >"$1" 2>/dev/null &
  mem_pid=$!
}
mem_stop() {
  [[ -n $mem_pid ]] && { kill "$mem_pid" 2>/dev/null; wait "$mem_pid" 2>/dev/null; }
  mem_pid=""
}
run() {
  run_args "$@"
  out=${out:-$root/build-gpu/out}
  mkdir -p "$out"
  local f
  for f in llmc.log llmc-mem.txt pipetrain.log pipetrain-mem.txt pipetrain-metrics.jsonl \
    llmc-peer.jsonl; do
    rm -f "${out:?}/$f"  # a previous run's, which the summary would read
  done
  command -v python3 >/dev/null || die "python3 is needed (token files, parsing)"
  [[ -x $bin ]] || die "$bin is missing: run scripts/llmc-peer.sh prepare here and carry .peers/bin"
  local ours
  ours=$(find_ours "$ours_arg")
  [[ -n $ours ]] || die "no pipetrain-gpt (--ours, build-gpu/ or build/)"
  if ! nvidia-smi -L >/dev/null 2>&1 && ! compgen -G "/dev/nvidia[0-9]*" >/dev/null; then
    echo '{"bench":"llmc_peer","status":"skipped (no GPU)"}'
    return 77
  fi
  library_path "$bin"
  [[ -z $(missing_libs "$bin") ]] ||
    die "train_gpt2cu cannot load $(missing_libs "$bin" | xargs)" \
      "(LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-})"
  local t0=$SECONDS
  work=$(mktemp -d "${TMPDIR:-/tmp}/llmc-peer.XXXXXX")  # global: the EXIT trap removes it
  trap 'mem_stop; rm -rf "$work"' EXIT
  if ! py tokens "$work/train.bin" $(((steps + 1) * batch * context + 1)) 1234 "$vocab" ||
    ! py tokens "$work/val.bin" $((batch * context + 1)) 5678 "$vocab"; then
    die "writing the token files in $work failed"
  fi
  echo "llmc-peer: token files written in $((SECONDS - t0)) s" >&2
  left() { echo $((budget - (SECONDS - t0))); }
  local llmc_rc=skipped ours_rc=skipped llmc_idle="" ours_idle="" limit stdbuf=()
  command -v stdbuf >/dev/null && stdbuf=(stdbuf -oL)
  # llm.c reads gpt2_tokenizer.bin and dev/data from its working directory: run it in $work.
  llmc_cmd "$work/train.bin" "$work/val.bin"
  local llmc_flags="${cmd[*]:1}"
  limit=$(($(left) * 2 / 5))
  if ((limit >= 30)); then
    echo "llmc-peer: llm.c (timeout ${limit} s): ${cmd[*]}" >&2
    mem_start "$out/llmc-mem.txt"
    llmc_idle=$mem_idle
    # stdbuf: llm.c's printf output reaches the log line by line, also when timeout kills it.
    (cd "$work" && timeout "$limit" "${stdbuf[@]}" "${cmd[@]}") >"$out/llmc.log" 2>&1
    llmc_rc=$?
    mem_stop
    tail -4 "$out/llmc.log" >&2
  fi
  ours_cmd "$ours" "$work/train.bin" "$out/pipetrain-metrics.jsonl"
  local ours_flags="${cmd[*]:1}"
  limit=$(($(left) - 10))
  if ((limit >= 30)); then
    echo "llmc-peer: pipetrain (timeout ${limit} s): ${cmd[*]}" >&2
    rm -f "$out/pipetrain-metrics.jsonl"
    mem_start "$out/pipetrain-mem.txt"
    ours_idle=$mem_idle
    timeout "$limit" "${cmd[@]}" >"$out/pipetrain.log" 2>&1
    ours_rc=$?
    mem_stop
    tail -4 "$out/pipetrain.log" >&2
  fi
  py summarize batch="$batch" context="$context" warmup="$warmup" \
    device="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null)" \
    llmc_log="$out/llmc.log" llmc_rc="$llmc_rc" llmc_mem="$out/llmc-mem.txt" \
    llmc_idle="$llmc_idle" llmc_flags="$llmc_flags" \
    ours_log="$out/pipetrain.log" ours_rc="$ours_rc" ours_mem="$out/pipetrain-mem.txt" \
    ours_idle="$ours_idle" ours_metrics="$out/pipetrain-metrics.jsonl" ours_flags="$ours_flags" |
    tee "$out/llmc-peer.jsonl"
  local rc=${PIPESTATUS[0]}
  echo "llmc-peer: done in $((SECONDS - t0)) s" >&2
  return "$rc"
}

(($#)) || usage
mode=$1
shift
case $mode in
  prepare) prepare "$@" ;;
  check | --dry-run) check "$@" ;;
  run) run "$@" ;;
  *) usage ;;
esac
