#!/usr/bin/env bash
# The one-shot GPU check: configure with CUDA (sm_90), build what the GPU needs, run the `gpu`
# tests, then the GPU benchmarks, then llm.c beside pipetrain-gpt (scripts/llmc-peer.sh), printing
# JSON lines. Sized for one 10-minute call of a borrowed GPU machine from a bare checkout: build,
# tests and bench/gpu under 8 minutes on an H200, then the peer step with what is left of
# $GPU_CHECK_LIMIT (default 580 s: the call's 600 less a margin), at most 270 s (about 1-2
# minutes when both programs run normally); with under 90 s left it is not run, and says so.
#
#   bash tests/gpu-check.sh [--deps DIR] [--out DIR] [--arch 90] [--no-peer]
#
#   --deps DIR  Debian packages (scripts/gpu-deps.sh downloads them) to unpack under /tmp when
#               the machine lacks fmt/oneDNN/doctest/CLI11/nlohmann-json (a GPU image with CUDA
#               and CMake but nothing else, and no network)
#   --out DIR   where logs and bench.jsonl go (default: $OUT when set, else build-gpu/out)
#   --no-peer   leave out the llm.c step. Otherwise it needs llm.c prebuilt off the GPU machine:
#               `bash scripts/llmc-peer.sh prepare` here, then carry `.peers/bin` (3.4 MiB) with
#               the call; without it the step fails and says so. It writes llmc-peer.jsonl.
#   $GPU_CHECK_CMAKE_ARGS  more options for the configure step (word-split)
#
# cuDNN and NCCL come from the CUDA toolkit (/usr/local/cuda) or, where only the Python wheels
# have them (nvidia-cudnn-cu13, nvidia-nccl-cu13), from there. MPI is used when mpicxx exists,
# else the build is single-process (-DPIPETRAIN_MPI=OFF). Exit code: 0 when every step passed,
# 77 when the build passed but there is no usable GPU, 1 otherwise.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
deps="" arch=90 out=${OUT:-} peer=1
while (($#)); do
  case $1 in
    --deps) deps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --arch) arch=$2; shift 2 ;;
    --no-peer) peer=0; shift ;;
    *) echo "usage: $0 [--deps DIR] [--out DIR] [--arch SM] [--no-peer]" >&2; exit 2 ;;
  esac
done
build=$root/build-gpu
out=${out:-$build/out}
mkdir -p "$out"
start=$(date +%s)
failed=() skipped=() not_run=()
step() { echo "== $* ($(($(date +%s) - start)) s)"; }
json() { echo "{\"bench\":\"gpu_check\",\"step\":\"$1\",\"status\":\"$2\",\"seconds\":$(($(date +%s) - start))}"; }

# ---- dependencies --------------------------------------------------------------------------
cmake_args=()
if [[ -n $deps ]]; then
  step "unpacking $(ls "$deps"/*.deb | wc -l) packages from $deps under /tmp/pipetrain-deps"
  prefix=/tmp/pipetrain-deps
  for f in "$deps"/*.deb; do dpkg -x "$f" "$prefix"; done
  # Debian's development links are absolute (libz.so -> /lib/.../libz.so.1.2.13): point them at
  # the unpacked copy, which the host's own library may not match.
  find "$prefix" -type l -lname '/*' | while read -r link; do
    target=$(readlink "$link")
    [[ -e $prefix$target ]] && ln -sfn "$prefix$target" "$link"
  done
  export CMAKE_PREFIX_PATH=$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
  export CPATH=$prefix/usr/include${CPATH:+:$CPATH}
  export LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LIBRARY_PATH:+:$LIBRARY_PATH}
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
# A CUDA library from the toolkit, else from its Python wheel: -D options for CMake.
cuda_library() {  # name (cudnn|nccl) header wheel-module
  local name=$1 header=$2 module=$3 upper
  upper=$(echo "$name" | tr a-z A-Z)
  if [[ -f /usr/local/cuda/include/$header ]]; then return; fi
  local dir
  dir=$(python3 -c "import $module as m; print(m.__path__[0])" 2>/dev/null) || dir=""
  if [[ -n $dir && -f $dir/include/$header ]]; then
    local lib
    lib=$(ls "$dir"/lib/lib"$name".so* 2>/dev/null | head -1)
    echo "   $name from the Python wheel: $lib"
    cmake_args+=("-DPIPETRAIN_${upper}_LIBRARY=$lib" "-DPIPETRAIN_${upper}_INCLUDE_DIR=$dir/include")
    export LD_LIBRARY_PATH=$dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  fi
}
cuda_library cudnn cudnn.h nvidia.cudnn
cuda_library nccl nccl.h nvidia.nccl
command -v mpicxx >/dev/null || cmake_args+=(-DPIPETRAIN_MPI=OFF)
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader

# ---- configure and build -------------------------------------------------------------------
step "configure (sm_$arch)"
if ! cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$arch" \
    -DPIPETRAIN_BUILD_EXAMPLES=ON "${cmake_args[@]}" ${GPU_CHECK_CMAKE_ARGS:-} >"$out/configure.log" 2>&1; then
  tail -30 "$out/configure.log"
  json configure failed
  exit 1
fi
grep -E "CUDA plugin|MPI off" "$out/configure.log"
step "build"
# pipetrain-gpt: the llm.c step's program (the examples are configured, only it is built)
targets=(pipetrain_cuda gpu_probe test_gpu test_cuda_host test_cuda_math pipetrain-bench-gpu
  pipetrain-gpt)
if ! cmake --build "$build" -j "$(nproc)" --target "${targets[@]}" >"$out/build.log" 2>&1; then
  grep -E "error|FAILED" "$out/build.log" | head -30
  json build failed
  exit 1
fi
json build passed

# ---- tests ---------------------------------------------------------------------------------
run() {  # name timeout command...
  local name=$1 limit=$2
  shift 2
  step "$name"
  timeout "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -25 "$out/$name.log"
  if ((rc == 0)); then json "$name" passed
  elif ((rc == 77)); then json "$name" "skipped (no usable GPU)"; skipped+=("$name")
  else json "$name" "failed (exit $rc)"; failed+=("$name"); fi
}
run gpu_probe 60 "$build/tests/gpu_probe"
run test_cuda_host 120 "$build/tests/test_cuda_host"
run test_cuda_math 120 "$build/tests/test_cuda_math"
run test_gpu 240 "$build/tests/test_gpu" --duration=true

# ---- benchmarks ----------------------------------------------------------------------------
step "bench/gpu"
timeout 240 "$build/bench/pipetrain-bench-gpu" --reps 5 2>"$out/bench.err" | tee "$out/bench.jsonl"
rc=${PIPESTATUS[0]}
if ((rc == 0)); then json bench passed
elif ((rc == 77)); then json bench "skipped (no usable GPU)"; skipped+=(bench)
else json bench "failed (exit $rc)"; tail -20 "$out/bench.err"; failed+=(bench); fi

# ---- llm.c beside pipetrain-gpt (issue 36) -------------------------------------------------
if ((peer)); then
  limit=${GPU_CHECK_LIMIT:-580}
  budget=$((limit - ($(date +%s) - start) - 10))
  ((budget > 270)) && budget=270
  step "llm.c peer (budget $budget s)"
  if [[ ! -x .peers/bin/train_gpt2cu ]]; then
    echo "no .peers/bin/train_gpt2cu: run 'bash scripts/llmc-peer.sh prepare' off the GPU" \
      "machine and carry .peers/bin (or pass --no-peer)"
    json llmc_peer "failed (llm.c not prepared)"
    failed+=(llmc_peer)
  elif ((budget < 90)); then
    echo "llm.c peer not run: $budget s left of GPU_CHECK_LIMIT=$limit"
    json llmc_peer "not run ($budget s left)"
    not_run+=(llmc_peer)
  else
    timeout $((budget + 20)) bash scripts/llmc-peer.sh run --ours "$build/examples/pipetrain-gpt" \
      --out "$out" --budget "$budget" 2>"$out/llmc-peer.err"
    rc=$?
    if ((rc == 0)); then json llmc_peer passed
    elif ((rc == 77)); then json llmc_peer "skipped (no usable GPU)"; skipped+=(llmc_peer)
    else json llmc_peer "failed (exit $rc)"; tail -20 "$out/llmc-peer.err"; failed+=(llmc_peer); fi
  fi
fi

step "done"
if ((${#not_run[@]})); then echo "NOT RUN (time): ${not_run[*]}"; fi
if ((${#failed[@]})); then
  echo "FAILED: ${failed[*]}"
  exit 1
fi
if ((${#skipped[@]})); then
  echo "SKIPPED (no usable GPU): ${skipped[*]}"
  exit 77
fi
echo "gpu check passed"
