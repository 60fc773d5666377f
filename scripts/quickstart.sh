#!/usr/bin/env bash
# README command (1): install dependencies, build (Release), train the Fashion-MNIST MLP.
# Extra arguments go to pipetrain-fashion, e.g. `bash scripts/quickstart.sh --model cnn`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build --target pipetrain-fashion
./build/examples/pipetrain-fashion --model mlp --epochs 3 "$@"
