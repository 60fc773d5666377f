#!/usr/bin/env bash
# Throughput of the parameter server vs all-reduce at R = 2 on the Fashion MLP, one thread per
# process (--threads 1), processes left to the OS scheduler (--bind-to none: 2 workers + K
# servers on this machine's 2 cores; a server mostly waits). Prints global steps/s:
#   all-reduce: fit's samples/s / batch (rank 0);  PS: the server's pushes/s / R while every
#   worker ran (an asynchronous fast worker finishes its steps first; after that only the slow
#   one runs, which says nothing about the steady state).
#   ps-throughput.sh <pipetrain-fashion> [batch] [steps] [data dir]
set -uo pipefail
exe=$1; batch=${2:-128}; steps=${3:-150}; data=${4:-/usr/share/datasets/fashion-mnist}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
run() {  # run LABEL NP args...
  local label=$1 np=$2; shift 2
  out=$(mpirun -np "$np" --oversubscribe --bind-to none "$exe" --data "$data" --batch "$batch" \
        --steps "$steps" --threads 1 "$@" 2>&1)
  local ps_rate ar_rate
  ps_rate=$(grep -oE "\(([0-9.]+) global steps/s\)" <<<"$out" | grep -oE "[0-9.]+" | head -1)
  ar_rate=$(grep -oE "\(([0-9.]+) samples/s\)" <<<"$out" | grep -oE "[0-9.]+" | head -1)
  if [ -n "$ps_rate" ]; then
    printf "%-40s %8s global steps/s  (%s)\n" "$label" "$ps_rate" "$(grep -oE "staleness max [0-9]+ pushes \([0-9.]+ global steps\), mean [0-9.]+ pushes" <<<"$out" | head -1)"
  else
    printf "%-40s %8.2f global steps/s\n" "$label" "$(echo "$ar_rate / $batch" | bc -l)"
  fi
}
run "all-reduce --dp 2" 2 --dp 2
run "PS sync (--ps 1)" 3 --dp 2 --ps 1
run "PS async T=1" 3 --dp 2 --ps 1 --staleness 1
run "PS async T=4" 3 --dp 2 --ps 1 --staleness 4
run "straggler 1:2, all-reduce --dp 2" 2 --dp 2 --slow-worker 1:2
run "straggler 1:2, PS sync" 3 --dp 2 --ps 1 --slow-worker 1:2
run "straggler 1:2, PS async T=1" 3 --dp 2 --ps 1 --staleness 1 --slow-worker 1:2
run "straggler 1:2, PS async T=4" 3 --dp 2 --ps 1 --staleness 4 --slow-worker 1:2
