#!/usr/bin/env bash
# Install/export test: install a built tree into a fresh prefix, build tests/install/consumer
# against it with find_package(pipetrain), run the program and check what it prints: the version,
# a shape, the CUDA status, and a 2-stage pipeline trained through the library's entry point
# (the loss after training must be finite and below the first step's).
#
#   run.sh <build dir> <consumer source dir> <cmake> <c++ compiler> <with-cuda-plugin|no-cuda-plugin>
#
# The build tree must be fully built (ctest runs after `cmake --build`).
set -euo pipefail

build_dir=$1
consumer_src=$2
cmake=${3:-cmake}
cxx=${4:-c++}
cuda_plugin=${5:-no-cuda-plugin}

fail() { echo "install_consumer: FAIL: $*" >&2; exit 1; }

work=$(mktemp -d "${TMPDIR:-/tmp}/pipetrain-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix

echo "== cmake --install $build_dir --prefix $prefix"
"$cmake" --install "$build_dir" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log"; fail "cmake --install failed (is the build tree fully built?)"; }

config=$(find "$prefix" -name pipetrainConfig.cmake -print -quit)
[[ -n $config ]] || fail "no pipetrainConfig.cmake under $prefix"
[[ -f $prefix/include/pipetrain/engine/core/shape.h ]] || fail "headers not installed"
if find "$prefix/include" -path '*/cuda/*' | grep -q .; then
  fail "CUDA headers were installed: $(find "$prefix/include" -path '*/cuda/*' | head -3)"
fi
# The library's entry point is installed, and no installed header needs CLI11 (only the examples do).
[[ -f $prefix/include/pipetrain/engine/setup/training_run.h ]] || fail "engine/setup headers not installed"
if grep -rl 'CLI/CLI.hpp' "$prefix/include"; then fail "installed headers include CLI11"; fi
# The test-only build with fault injection is never installed.
[[ ! -e $prefix/bin/pipetrain-fashion-faults ]] || fail "pipetrain-fashion-faults (test-only) was installed"
# Every project header an installed header includes is installed too.
missing=$(cd "$prefix/include/pipetrain" && grep -rho '#include "[^"]*"' . | sed 's/#include "\(.*\)"/\1/' |
  sort -u | while read -r h; do [[ -f $h ]] || echo "$h"; done)
[[ -z $missing ]] || fail "installed headers include headers that were not installed: $missing"

plugin=$(find "$prefix" -name libpipetrain_cuda.so -print -quit)
if [[ $cuda_plugin == with-cuda-plugin ]]; then
  [[ -n $plugin ]] || fail "the CUDA plugin was built but not installed"
  [[ $plugin == */pipetrain/libpipetrain_cuda.so ]] || fail "plugin installed at $plugin"
  # The installed plugin must still find libcudart & co. (its install RPATH) and never needs
  # the driver library.
  if ldd "$plugin" | grep -E 'not found'; then fail "installed plugin has unresolved libraries"; fi
  if ldd "$plugin" | grep -E 'libcuda\.so'; then fail "the plugin links the driver (-lcuda)"; fi
else
  [[ -z $plugin ]] || fail "found $plugin although the plugin was not built"
fi

generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi

echo "== configure the consumer against $prefix"
"$cmake" -S "$consumer_src" -B "$work/build" "${generator[@]}" \
  -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
  >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure failed"; }

echo "== build the consumer"
"$cmake" --build "$work/build" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "build failed"; }

# A program linked to pipetrain::pipetrain must not load any CUDA library itself.
if ldd "$work/build/consumer" | grep -E 'libcuda|libcudart|libcublas|libcudnn|libnccl'; then
  fail "the consumer links CUDA libraries directly"
fi

echo "== run the consumer"
# Point the loader at the installed plugin, if any, so that loading it from the prefix is tested.
if [[ -n $plugin ]]; then export PIPETRAIN_CUDA_PLUGIN=$plugin; else unset PIPETRAIN_CUDA_PLUGIN; fi
output=$("$work/build/consumer") || fail "consumer exited with $?"
echo "$output"

expected_version=$(sed -n 's/^project(pipetrain VERSION \([0-9.]*\).*/\1/p' "$(dirname "$0")/../../CMakeLists.txt")
grep -qx "pipetrain ${expected_version:-0.1.0}" <<<"$output" || fail "wrong version line"
grep -qx "shape (2, 3, 4) numel 24" <<<"$output" || fail "wrong shape line"
grep -qx "device cpu:0" <<<"$output" || fail "the consumer could not open cpu:0 (is the CPU backend registered?)"
cuda_line=$(grep '^cuda: ' <<<"$output") || fail "no cuda line"
if grep -q 'cannot load' <<<"$cuda_line"; then fail "the installed plugin did not load: $cuda_line"; fi
if [[ $cuda_plugin == no-cuda-plugin ]]; then
  grep -q 'built without the CUDA plugin' <<<"$cuda_line" || fail "unexpected: $cuda_line"
fi
number='-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?'  # finite: no nan or inf
train_line=$(grep -E "^\{\"stages\": [0-9]+, \"loss\": $number\}$" <<<"$output") ||
  fail "no {\"stages\": N, \"loss\": X} line with a finite loss"
first_line=$(grep -E "^\{\"first_loss\": $number, \"steps\": [0-9]+\}$" <<<"$output") ||
  fail "no {\"first_loss\": X, \"steps\": N} line with a finite loss"
stages=$(sed -E 's/.*"stages": ([0-9]+).*/\1/' <<<"$train_line")
loss=$(sed -E 's/.*"loss": ([^}]*)\}/\1/' <<<"$train_line")
first=$(sed -E 's/.*"first_loss": ([^,]*),.*/\1/' <<<"$first_line")
[[ $stages == 2 ]] || fail "trained $stages stages, not 2"
awk -v l="$loss" -v f="$first" 'BEGIN { exit !(l > 0 && l < f) }' ||
  fail "training did not lower the loss: first step $first, after training $loss"

if [[ -n $plugin ]]; then
  echo "== run the consumer from $prefix/bin: the loader finds the plugin in the prefix by itself"
  unset PIPETRAIN_CUDA_PLUGIN
  mkdir -p "$prefix/bin"
  cp "$work/build/consumer" "$prefix/bin/consumer"
  cuda_line=$("$prefix/bin/consumer" | grep '^cuda: ') || fail "no cuda line from $prefix/bin"
  echo "$cuda_line"
  if grep -q 'cannot load' <<<"$cuda_line"; then fail "plugin not found from $prefix/bin"; fi
fi
echo "install_consumer: OK"
