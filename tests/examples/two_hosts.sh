#!/usr/bin/env bash
# Multi-process training across two "hosts": two Linux network namespaces joined by a veth pair,
# MPI over TCP between them (scripts/two-hosts-lib.sh), --stages 2 --dp 2 over 4 processes, 2 per
# host, in two layouts (world rank = replica * 2 + stage):
#   by slot (mpirun's default): host A runs ranks 0,1 (replica 0), host B 2,3 (replica 1): the
#     gradient all-reduce crosses the link;
#   by node (--map-by node): host A runs ranks 0,2 (stage 0), host B 1,3 (stage 1): the pipeline's
#     activations and gradients cross the link.
#
#  1. The same 5 steps on one host (mpirun on loopback, shared memory) and across the two hosts in
#     either layout: the checkpoints are bit-identical.
#  2. Across a slow link (tbf: 200 Mbit/s, packets queued up to 20 ms), by slot: slower, still
#     bit-identical.
#  3. The link cut (from outside, on host B's side) after step 2 of a long run by node with 4
#     micro-batches and --timeout 5: every rank exits within the timeout plus a margin, each that
#     speaks names the action it waited in and a peer, on each host one names a rank across the
#     link (host A's ranks may instead be ended by the first one's abort), and Open MPI's own
#     processes (mpirun, host B's daemon) end too.
#
#   two_hosts.sh <pipetrain-fashion> [data dir]
# Needs root (ip netns), iproute2, mpirun, python3 and Fashion-MNIST; exits 77 (skip) without.
set -uo pipefail
exe=$(realpath "$1")
data=${2:-/usr/share/datasets/fashion-mnist}
here=$(cd "$(dirname "$0")" && pwd)
compare="python3 $here/compare_checkpoints.py --quiet"
[ -f "$data/train-images-idx3-ubyte.gz" ] || [ -f "$data/train-images-idx3-ubyte" ] || { echo "SKIP: no data in $data"; exit 77; }
command -v mpirun >/dev/null || { echo "SKIP: mpirun not found"; exit 77; }
command -v python3 >/dev/null || { echo "SKIP: python3 not found"; exit 77; }
command -v tc >/dev/null || { echo "SKIP: tc (iproute2) not found"; exit 77; }
source "$here/../../scripts/two-hosts-lib.sh"
work=$(mktemp -d)
# Whatever happens (failure, ctest's timeout, Ctrl-C), the namespaces, the veth pair and every
# process in them go, and nothing is left behind for the next run.
trap 'two_hosts_down; rm -rf "$work"' EXIT
trap 'exit 130' INT TERM
two_hosts_up "$work" > "$work/up.txt" 2>&1 || { echo "SKIP: $(cat "$work/up.txt")"; exit 77; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails+1)); }
steps=5
timeout_s=5
# One thread per process: the GEMMs' arithmetic depends on the thread count.
common=("$exe" --data "$data" --batch 32 --seed 7 --log-every 1 --threads 1 --stages 2 --dp 2)
seconds_of() { sed -n 's/^trained .* in \([0-9.]*\) s .*/\1/p' "$1"; }

# ---- 1. one host vs two hosts: bit-identical --------------------------------------------------
# One host is host A alone (so that every process of this test lives in the namespaces, and goes
# with them); vader's single copy needs ptrace permission, which containers often deny: off, as in
# the other tests.
ip netns exec "$ns_a" timeout -k 5 120 mpirun -np 4 --oversubscribe --mca btl self,vader \
  --mca btl_vader_single_copy_mechanism none "${common[@]}" --steps $steps --timeout $timeout_s \
  --save "$work/one" > "$work/one.txt" 2>&1 || { fail "the run on one host"; tail -20 "$work/one.txt"; exit 1; }
two_hosts_mpirun 120 "${common[@]}" --steps $steps --timeout $timeout_s --save "$work/two" \
  > "$work/two.txt" 2>&1 || { fail "the run across two hosts"; tail -20 "$work/two.txt"; exit 1; }
out=$($compare "$work/one" "$work/two") || fail "two hosts vs one host: $out"
echo "$out (two hosts over TCP by slot vs one host over shared memory; $steps steps in $(seconds_of "$work/two.txt") s vs $(seconds_of "$work/one.txt") s)"
two_hosts_mpirun 120 --map-by node "${common[@]}" --steps $steps --timeout $timeout_s \
  --save "$work/by-node" > "$work/by-node.txt" 2>&1 || { fail "the run across two hosts by node"; tail -20 "$work/by-node.txt"; }
out=$($compare "$work/one" "$work/by-node") || fail "two hosts by node vs one host: $out"
echo "$out (two hosts by node, the pipeline across the link, vs one host)"

# ---- 2. a slow link: slower, the same parameters ----------------------------------------------
# Each step all-reduces the 3,962,890 gradients (15.9 MB) across the link: every rank sends at
# least that much (ring or recursive doubling alike), so 5 steps take >= 3.17 s at 200 Mbit/s
# whatever the load on the machine. Checked against 3.0 s (tbf lets a burst through at once).
two_hosts_slow_link 200mbit 20ms || fail "tc tbf on the veth pair"
two_hosts_mpirun 120 "${common[@]}" --steps $steps --timeout $timeout_s --save "$work/slow" \
  > "$work/slow.txt" 2>&1 || { fail "the run across a slow link"; tail -20 "$work/slow.txt"; }
out=$($compare "$work/one" "$work/slow") || fail "slow link vs one host: $out"
fast=$(seconds_of "$work/two.txt") slow=$(seconds_of "$work/slow.txt")
python3 -c "import sys; sys.exit(0 if ${slow:-0} >= 3.0 and ${slow:-0} > ${fast:-1e9} else 1)" \
  || fail "the slow link did not slow training down to >= 3.0 s ($slow s vs $fast s)"
echo "$out (across 200 Mbit/s: $steps steps in $slow s vs $fast s unlimited)"
two_hosts_fast_link

# ---- 3. the link cut mid-run ------------------------------------------------------------------
# --output-filename: each host's daemon also writes its ranks' output to files, since host B's
# output no longer reaches mpirun once the link is down.
two_hosts_mpirun 90 --map-by node --output-filename "$work/logs" "${common[@]}" --microbatches 4 \
  --steps 100000 --timeout $timeout_s --metrics "$work/m.jsonl" > "$work/cut.txt" 2>&1 &
for _ in $(seq 600); do grep -q '"step": 2,' "$work/m.jsonl" 2>/dev/null && break; sleep 0.1; done
# The 4 ranks: the processes running $exe in either namespace.
declare -A rank_pid gone_at named_across
for ns in "$ns_a" "$ns_b"; do
  for pid in $(ip netns pids "$ns"); do
    [ "$(readlink /proc/$pid/exe 2>/dev/null)" = "$exe" ] || continue
    r=$(tr '\0' '\n' < /proc/$pid/environ | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    rank_pid[$r]=$pid
  done
done
if ! grep -q '"step": 2,' "$work/m.jsonl" 2>/dev/null || [ ${#rank_pid[@]} -ne 4 ]; then
  fail "the run never reached step 2 with 4 ranks (${#rank_pid[@]} found)"; tail -20 "$work/cut.txt"
else
  t0=$EPOCHREALTIME
  two_hosts_cut
  # Polls every 0.1 s until no process is left in either namespace (mpirun and the daemons too),
  # 60 s at most. A rank is gone once its /proc/PID/exe no longer resolves (exited, even if not
  # yet reaped).
  cap=$((SECONDS + 60))
  while [ -n "$(ip netns pids "$ns_a")$(ip netns pids "$ns_b")" ] && [ $SECONDS -lt $cap ]; do
    now=$EPOCHREALTIME
    for r in "${!rank_pid[@]}"; do
      [ -z "${gone_at[$r]:-}" ] && [ ! -e /proc/${rank_pid[$r]}/exe ] && gone_at[$r]=$now
    done
    sleep 0.1
  done
  t_all=$EPOCHREALTIME
  for r in 0 1 2 3; do
    secs=$(python3 -c "print(f'{${gone_at[$r]:-$t_all} - $t0:.2f}')")
    host=$( ((r % 2 == 0)) && echo A || echo B)
    line=$(grep -h "^error: rank $r:" "$work/logs"/1/rank.$r/stderr 2>/dev/null | head -1)
    echo "measured: rank $r (host $host) exited $secs s after the cut: ${line:-(no message of its own)}"
    python3 -c "import sys; sys.exit(0 if $secs <= $timeout_s + 3 else 1)" || fail "rank $r took $secs s to exit (--timeout $timeout_s)"
    if [ -n "$line" ]; then
      grep -qE "all-reduce|all_reduce|exchange|recv|send" <<<"$line" || fail "rank $r's message names no action: $line"
      grep -qE "waiting for world ranks? [0-9]" <<<"$line" || fail "rank $r's message names no peer: $line"
      # Who is across the link: world ranks 1,3 for host A, 0,2 for host B.
      other='[02]'; [ $host = A ] && other='[13]'
      grep -qE "waiting for world ranks? ([0-9]+, )*$other([^0-9]|$)" <<<"$line" && named_across[$host]=1
    elif [ $host = B ]; then
      fail "rank $r on host B (cut off from mpirun) exited without a message"
    fi
  done
  # A rank may wait for a peer on its own host that waits across the link (a replica stuck in
  # the gradient all-reduce waits for one stuck in a pipeline transfer): that message is true
  # too. But on each host at least one rank names a rank on the other.
  for host in A B; do
    [ -n "${named_across[$host]:-}" ] || fail "no rank on host $host named a rank on the other host"
  done
  [ $fails -eq 0 ] || { echo "mpirun's output:"; tr '\r' '\n' < "$work/cut.txt" | grep -v '^train' | tail -20; }
  secs=$(python3 -c "print(f'{$t_all - $t0:.2f}')")
  echo "measured: mpirun and both hosts' daemons gone $secs s after the cut"
  # The ranks' timeout, then TCP's ~13 s of retransmissions (tcp_retries2=5, two-hosts-lib.sh):
  # ~21 s measured; the bound (timeout + 30 s) leaves room for a busy machine.
  python3 -c "import sys; sys.exit(0 if $secs <= $timeout_s + 30 else 1)" \
    || fail "Open MPI's processes were still there $secs s after the cut: $(ip netns pids "$ns_a") $(ip netns pids "$ns_b")"
fi
wait

[ $fails -eq 0 ] && echo "all two-host cases passed" || { echo "$fails case(s) failed"; exit 1; }
