#!/usr/bin/env bash
# README command (1): install dependencies, build (Release), and train the Fashion-MNIST MLP as a
# 2-stage pipeline (one CPU device per stage, 8 micro-batches per batch): the plan, progress, the
# test accuracy, and the measured bubble beside the one simulated from the run's own action times.
# Extra arguments go to pipetrain-fashion and replace these defaults, e.g.
# `bash scripts/quickstart.sh --model cnn` or `bash scripts/quickstart.sh --stages 1 --microbatches 1`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --target pipetrain-fashion
given() {  # given FLAG: the user passed FLAG (as "FLAG VALUE" or "FLAG=VALUE")
  local a
  for a in "${@:2}"; do [[ $a == "$1" || $a == "$1="* ]] && return 0; done
  return 1
}
defaults=()
given --model "$@" || defaults+=(--model mlp)
given --epochs "$@" || given --steps "$@" || defaults+=(--epochs 3)
given --stages "$@" || defaults+=(--stages 2)
given --microbatches "$@" || defaults+=(--microbatches 8)
./build/examples/pipetrain-fashion "${defaults[@]}" "$@"
