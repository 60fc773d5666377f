#!/usr/bin/env bash
# Downloads (does not install) the Debian packages pipetrain builds against, into DIR (default
# .gpu-deps/, ignored by git), for a GPU machine that has CUDA, CMake and a compiler but none of
# our libraries and no network: carry DIR there and run `bash tests/gpu-check.sh --deps DIR`,
# which unpacks them under /tmp (never into /). MPI is left out: the GPU check builds without it.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-.gpu-deps}
mkdir -p "$dir"
cd "$dir"
packages=(
  libfmt-dev libfmt9 libdnnl-dev libdnnl2
  ocl-icd-libopencl1 ocl-icd-opencl-dev opencl-c-headers opencl-clhpp-headers
  doctest-dev libcli11-dev nlohmann-json3-dev zlib1g-dev zlib1g
)
apt-get download "${packages[@]}"
echo "downloaded ${#packages[@]} packages into $(pwd) ($(du -sh . | cut -f1))"
