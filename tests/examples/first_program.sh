#!/usr/bin/env bash
# The README's first program (examples/first/main.cpp) runs as printed: it trains the 2-stage
# pipeline for one epoch and must beat chance by far (10 classes: 10%; one epoch of the default
# SGD reaches about 80%). Skips (77) when Fashion-MNIST is not installed.
set -euo pipefail
exe=$1
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] ||
  { echo "no Fashion-MNIST installed: skipped"; exit 77; }
out=$("$exe" 2>&1) || { echo "$out"; echo "FAIL: the first program exited non-zero"; exit 1; }
echo "$out"
grep -q '2 stages' <<<"$out" || { echo "FAIL: no '2 stages' in the plan it printed"; exit 1; }
acc=$(sed -n 's/^test accuracy \([0-9.]*\)$/\1/p' <<<"$out")
[ -n "$acc" ] || { echo "FAIL: no 'test accuracy' line"; exit 1; }
awk -v a="$acc" 'BEGIN { if (a + 0 >= 0.70) { print "PASS: " a " >= 0.70"; exit 0 } print "FAIL: " a " < 0.70"; exit 1 }'
