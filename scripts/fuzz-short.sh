#!/usr/bin/env bash
# Builds the fuzz targets (tests/fuzz) with clang-14, libFuzzer, ASan and UBSan in build-fuzz (or
# in the build --build names: CI's ASan + UBSan build, configured with -DPIPETRAIN_FUZZ=ON, holds
# them beside the tests), and runs each for a fixed number of inputs, starting from its seeds
# (tests/fuzz/make-seeds.sh).
# Fails on any finding: a crash, a sanitizer report, a leak, an input slower than --timeout
# seconds, more than 2 GiB of memory, or an exception other than the parser's error type
# (tests/fuzz/fuzz_support.h). The input that found it is kept in build-fuzz/findings/.
#
#   scripts/fuzz-short.sh                      what CI runs: 20000 inputs per target (idx: 2000)
#   scripts/fuzz-short.sh --runs 1000000 idx   a long run of one target (seconds are printed)
#   scripts/fuzz-short.sh --build build-asan   the targets of an existing -DPIPETRAIN_FUZZ=ON build
#
# Options: --runs N (default 20000), --max-time S (cap per target, default 300), --timeout S (per
# input, default 10), --keep-corpus (start from what the last run of each target found, in
# build-fuzz/corpus/TARGET, instead of from the seeds alone). The corpora stay out of the
# repository; only the seed script is in it.
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=(safetensors manifest idx schedule text_corpus token_file fashion_flags gpt_flags plan_inputs plan_flags)
runs=20000 max_time=300 timeout=10 keep_corpus=0 targets=() build=build-fuzz
# The IDX target is the slowest (~300 inputs/s against 1000-3000): zlib's buffers (the reader's
# 128 KiB gzbuffer, the target's deflate) are large allocations, which ASan maps and unmaps on
# every input. Its short run is 2000 inputs, about as long as the others' 20000.
declare -A short_runs=([idx]=2000)
runs_given=0
while (($#)); do
  case $1 in
    --runs) runs=$2; runs_given=1; shift 2 ;;
    --max-time) max_time=$2; shift 2 ;;
    --timeout) timeout=$2; shift 2 ;;
    --keep-corpus) keep_corpus=1; shift ;;
    --build) build=$2; shift 2 ;;
    -h | --help) sed -n '2,19p' "$0"; exit 0 ;;
    -*) echo "fuzz-short: unknown option '$1'" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
((${#targets[@]})) || targets=("${all_targets[@]}")

if [[ -f $build/CMakeCache.txt ]] && ! grep -q '^PIPETRAIN_FUZZ:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "fuzz-short: $build is not configured with -DPIPETRAIN_FUZZ=ON (clang-14): reconfigure it" \
    "so, or leave out --build to use build-fuzz" >&2
  exit 2
fi
if [[ ! -f $build/build.ninja ]]; then
  # -O1 and line tables only: fast to build, fast to run, and sanitizer reports name the line.
  # No MPI, CUDA, tests, examples or benchmarks: only what the fuzz targets link.
  CC=clang-14 CXX=clang++-14 cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -gline-tables-only" -DPIPETRAIN_FUZZ=ON -DPIPETRAIN_WERROR=ON \
    -DPIPETRAIN_CUDA=OFF -DPIPETRAIN_MPI=OFF -DPIPETRAIN_BUILD_TESTS=OFF \
    -DPIPETRAIN_BUILD_EXAMPLES=OFF -DPIPETRAIN_BUILD_BENCH=OFF
fi
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/%/_fuzz}"
bash tests/fuzz/make-seeds.sh "$build/seeds" >/dev/null

# The targets that read a path write each input to a file: in memory when /dev/shm is there
# (4x faster than a disk-backed /tmp here).
[[ -w /dev/shm ]] && export TMPDIR=/dev/shm
# No allocation stacks and a small quarantine: 3-4x more inputs per second for the targets that
# allocate much (CLI11, JSON). A leak is still found; for its stack rerun the input it left in
# build-fuzz/findings with the plain program (`build-fuzz/tests/fuzz/TARGET_fuzz FILE`).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:malloc_context_size=0:quarantine_size_mb=8
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
mkdir -p "$build/findings" "$build/logs"
failed=()
printf '%-14s %10s %8s  %s\n' target inputs seconds result
for t in "${targets[@]}"; do
  corpus=$build/corpus/$t
  ((keep_corpus)) || rm -rf "$corpus"
  mkdir -p "$corpus"
  log=$build/logs/$t.log
  start=$SECONDS
  rc=0
  n=$runs
  ((runs_given)) || n=${short_runs[$t]:-$runs}
  "$build/tests/fuzz/${t}_fuzz" -runs="$n" -max_total_time="$max_time" -timeout="$timeout" \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -seed=1 -print_final_stats=1 \
    -artifact_prefix="$build/findings/$t-" "$corpus" "$build/seeds/$t" >"$log" 2>&1 || rc=$?
  done_line=$(grep -E '^stat::number_of_executed_units' "$log" | tail -1 || true)
  if ((rc == 0)); then
    result="ok"
  else
    result="FINDING (exit $rc): $(grep -m1 -E 'ERROR: |FINDING|runtime error' "$log" || echo 'see log')"
    failed+=("$t")
  fi
  printf '%-14s %10s %8s  %s\n' "$t" "${done_line##*: }" "$((SECONDS - start))" "$result"
done
if ((${#failed[@]})); then
  echo "fuzzing found problems in: ${failed[*]} (logs in $build/logs, inputs in $build/findings)"
  exit 1
fi
echo "fuzzing: no findings in ${#targets[@]} targets"
