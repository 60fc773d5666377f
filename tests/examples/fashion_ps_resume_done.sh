#!/usr/bin/env bash
# Resuming a --ps checkpoint that is already at the last step (issue 37): the workers have nothing
# left to train and stop before their first step. They used to stop without a word to the servers,
# which waited for replica 0's initial parameters for a whole --timeout and then failed the job
# (rc 1, blaming rank 0; 66 s with the default timeout). Now a worker that never started still says
# STOP, and a server that gets STOP where INIT was due ends at once: every rank exits 0, well within
# --timeout (90 s here: the bound below is a third of it, so a wait for the timeout fails the test;
# the bound leaves room for a 5-process job under ASan on 2 cores, which took 11 s).
# Cases: synchronous (-np 3), asynchronous (--staleness 1, -np 3), two servers (-np 4), two stages
# (-np 5), and the in-process servers (one process, server threads).
#
#   fashion_ps_resume_done.sh <pipetrain-fashion> [data dir]
# Needs the Fashion-MNIST files and mpirun; exits 77 (skip) without them.
set -uo pipefail
exe=$1
data=${2:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "no data in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "mpirun not found"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
source "$here/mpi_runs.sh"  # fail, run
limit=30  # seconds per resumed run; --timeout is 90

# done_resume NAME NP args...: trains 2 steps with a save, then resumes that checkpoint for the
# same 2 steps; the resumed run must say "nothing left to train" and exit 0 within $limit s.
done_resume() {
  local name=$1 np=$2; shift 2
  run "$np" "$@" --steps 2 --timeout 90 --save "$tmp/$name"
  [ $rc -eq 0 ] || { fail "$name: training 2 steps failed (rc $rc)"; return; }
  run "$np" "$@" --steps 2 --timeout 90 --resume "$tmp/$name"
  if [ $rc -ne 0 ] || [ $secs -gt $limit ] || ! grep -q "nothing left to train" <<<"$out" ||
     grep -qi "timed out\|error" <<<"$out"; then
    fail "$name: resuming at the last step gave rc $rc after $secs s (want rc 0 within $limit s)"
  else
    echo "ok ($secs s): $name resumed at its last step: nothing left to train, rc 0"
  fi
}

done_resume sync 3 --dp 2 --ps 1
done_resume async 3 --dp 2 --ps 1 --staleness 1
done_resume two_servers 4 --dp 2 --ps 2
done_resume stages 5 --dp 2 --stages 2 --microbatches 2 --ps 1
done_resume in_process 0 --devices cpu:0..1 --dp 2 --ps 1

[ $fails -eq 0 ] && echo "all passed" || echo "$fails failed"
[ $fails -eq 0 ]
