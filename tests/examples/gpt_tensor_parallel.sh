#!/usr/bin/env bash
# pipetrain-gpt --tp (heads, MLP and vocabulary split; tied embedding and head across stages):
#  - one process per device (mpirun -np 4: 2 stages x 2 tensor ranks) saves the same bits as one
#    process with 4 virtual devices, with sequence parallelism (the default) and without;
#  - --sequence-parallel on and off end within 1e-5 (the LayerNorm gradients are summed chunk by
#    chunk: tests/tensor_parallel/sequence_parallel_test.cpp bounds the difference at 1e-6);
#  - --tp 1 from the same --tp 2 checkpoint within 1e-5, and text is sampled from a --tp run;
#  - --tp-overlap off and on (stage 0's adjacent forwards, across their SEND_F, take turns at
#    their collectives) save the same bits as backward (the default), in one process and under
#    mpirun;
#  - refusals: heads or a context --tp does not divide.
#
#   gpt_tensor_parallel.sh <pipetrain-gpt> [--mpi]
set -uo pipefail
exe=$1
with_mpi=${2:-}
here=$(cd "$(dirname "$0")" && pwd)
compare="python3 $here/compare_checkpoints.py"
command -v python3 >/dev/null || { echo "python3 not found"; exit 77; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
source "$here/expect.sh"  # expect_refused
for i in $(seq 1 200); do echo "Line $i: In the beginning God created the heaven and the earth, $((i * 7919 % 1000))."; done > "$work/text.txt"
base=(--d-model 32 --layers 2 --heads 4 --batch 4 --microbatches 2 --eval-windows 8
      --eval-every 0 --data "$work/text.txt" --threads 1 --timeout 60)

expect_refused "n_heads (4) does not split across 8" "${base[@]}" --context 32 --tp 8 --devices cpu:0..7 --steps 1
expect_refused "does not divide by --tp" "${base[@]}" --context 30 --tp 4 --devices cpu:0..3 --steps 1

run() {  # run NAME [launcher...] -- args...
  local name=$1; shift
  local launch=()
  while [ "$1" != "--" ]; do launch+=("$1"); shift; done; shift
  timeout 300 "${launch[@]}" "$exe" "${base[@]}" --context 32 "$@" > "$work/$name.txt" 2>&1
  local rc=$?
  if [ $rc -ne 0 ]; then fail "$name: ${launch[*]} $* exited with $rc:"; tail -20 "$work/$name.txt"; return 1; fi
  echo "ok: $name: ${launch[*]} $*"
}
same() {
  if $compare "$work/$1" "$work/$2" >"$work/cmp.txt" 2>&1; then echo "ok: $1 == $2 (bit for bit)"
  else fail "$1 != $2"; cat "$work/cmp.txt"; fi
}
close() {
  if $compare "$work/$1" "$work/$2" --tolerance "$3" >"$work/cmp.txt" 2>&1; then
    echo "ok: $1 ~ $2 ($(tail -1 "$work/cmp.txt"))"
  else fail "$1 !~ $2 within $3"; cat "$work/cmp.txt"; fi
}

st=(--stages 2 --tp 2)
run sp -- "${st[@]}" --steps 4 --devices cpu:0..3 --save "$work/sp" --sample-bytes 16
grep -q "tensor-parallel ranks per stage" "$work/sp.txt" || fail "the start-up line does not say --tp"
grep -qa "^sample (16 bytes" "$work/sp.txt" || fail "no text sampled after a --tp run"
run nosp -- "${st[@]}" --steps 4 --sample-bytes 0 --devices cpu:0..3 --sequence-parallel off --save "$work/nosp"
close sp nosp 1e-5
run serial -- "${st[@]}" --steps 4 --sample-bytes 16 --devices cpu:0..3 --tp-overlap off --save "$work/serial"
same sp serial
run turns -- "${st[@]}" --steps 4 --sample-bytes 0 --devices cpu:0..3 --tp-overlap on --save "$work/turns"
same sp turns
expect_refused "--tp-overlap maybe is not a choice" "${base[@]}" --context 32 --tp 2 --devices cpu:0..1 --steps 1 --tp-overlap maybe
run half -- "${st[@]}" --sample-bytes 0 --devices cpu:0..3 --steps 2 --save "$work/half"
run t1 -- --stages 2 --sample-bytes 0 --steps 4 --devices cpu:0..1 --resume "$work/half" --save "$work/t1"
close sp t1 1e-5
if [ "$with_mpi" = --mpi ] && command -v mpirun >/dev/null; then
  run mpi_sp mpirun -np 4 --oversubscribe -- "${st[@]}" --steps 4 --sample-bytes 16 --save "$work/mpi_sp"
  same sp mpi_sp
  run mpi_nosp mpirun -np 4 --oversubscribe -- "${st[@]}" --steps 4 --sample-bytes 0 --sequence-parallel off --save "$work/mpi_nosp"
  same nosp mpi_nosp
  run mpi_serial mpirun -np 4 --oversubscribe -- "${st[@]}" --steps 4 --sample-bytes 16 --tp-overlap off --save "$work/mpi_serial"
  same sp mpi_serial
  run mpi_turns mpirun -np 4 --oversubscribe -- "${st[@]}" --steps 4 --sample-bytes 0 --tp-overlap on --save "$work/mpi_turns"
  same sp mpi_turns
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
