#!/usr/bin/env bash
# All-reduce and send/recv bandwidth between two "hosts" (network namespaces joined by a veth
# pair, MPI over TCP: scripts/two-hosts-lib.sh), one process per host, over the unlimited link and
# over a link limited with tc tbf; and on one host over shared memory (Open MPI's vader), beside
# it. Prints pipetrain-bench-allreduce's JSON lines, each with a "link" field added:
#
#   "veth"            two hosts, TCP over the veth pair, no limit (the kernel's copy speed)
#   "veth-tbf-RATE"   the same through tbf: at most RATE, packets queued for at most LATENCY
#   "shm"             one host, shared memory
#
#   two-hosts-bench.sh [pipetrain-bench-allreduce] [--max-mb MB] [--rate RATE] [--latency MS]
# Defaults: build/bench/pipetrain-bench-allreduce, 64 MiB, 1gbit (a 1 GbE link), 20ms. Needs root
# (ip netns) and mpirun. Takes about 2 minutes at the defaults.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exe=$here/../build/bench/pipetrain-bench-allreduce
max_mb=64 rate=1gbit latency=20ms
while (($#)); do
  case $1 in
    --max-mb) max_mb=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --latency) latency=$2; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0"; exit 0 ;;
    *) exe=$1; shift ;;
  esac
done
exe=$(realpath "$exe")
[ -x "$exe" ] || { echo "two-hosts-bench: $exe not found: build pipetrain-bench-allreduce first" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "two-hosts-bench: mpirun not found" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1

two_hosts_per_host=1
source "$here/two-hosts-lib.sh"
work=$(mktemp -d)
trap 'two_hosts_down; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
two_hosts_up "$work" >&2 || { echo "two-hosts-bench: needs root and ip netns" >&2; exit 1; }

# Runs the benchmark ("$@" launches it) and tags each JSON line with the link; everything else
# (Open MPI's notices) goes to stderr.
tagged() {
  local link=$1; shift
  "$@" "$exe" --max-mb "$max_mb" --timeout 120 2> >(cat >&2) |
    while IFS= read -r line; do
      if [[ $line == '{'* ]]; then echo "{\"link\": \"$link\", ${line#\{}"; else echo "$line" >&2; fi
    done
}

tagged veth two_hosts_mpirun 600
two_hosts_slow_link "$rate" "$latency"
tagged "veth-tbf-$rate" two_hosts_mpirun 600
two_hosts_fast_link
# One host (host A alone): shared memory only (single copy off, as in the tests: it needs ptrace
# permission, which containers often deny).
tagged shm ip netns exec "$ns_a" timeout -k 5 600 mpirun -np 2 --oversubscribe --mca btl self,vader \
  --mca btl_vader_single_copy_mechanism none
