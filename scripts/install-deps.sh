#!/usr/bin/env bash
# Installs pipetrain's build and run dependencies (Debian 12 packages only; run as root).
# clang-14, its runtimes (libFuzzer, sanitizers) and its OpenMP build the fuzz targets
# (scripts/fuzz-short.sh). Skips apt entirely when every package is already installed, so
# offline re-runs work.
set -euo pipefail
packages=(
  cmake ninja-build g++ pkg-config clang-format
  clang-14 libclang-rt-14-dev libomp-14-dev
  libfmt-dev doctest-dev libcli11-dev nlohmann-json3-dev
  libdnnl-dev ocl-icd-opencl-dev zlib1g-dev
  libopenmpi-dev openmpi-bin
  iproute2  # ip netns, tc: tests/examples/two_hosts.sh (two "hosts" in network namespaces)
  slurmctld slurmd slurm-client munge  # a one-node Slurm cluster: scripts/slurm-local.sh, tests/examples/slurm.sh
  python3
  dataset-fashion-mnist bible-kjv
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "all ${#packages[@]} Debian packages are installed"
fi
