# Sourced by tests/examples/two_hosts.sh and scripts/two-hosts-bench.sh: two "hosts" on one
# machine, made of two Linux network namespaces joined by a veth pair, and an mpirun that starts
# its processes in both with MPI over TCP between them.
#
#   host A: namespace $ns_a, $veth_a = 10.77.0.1/24  <--veth-->  host B: namespace $ns_b, $veth_b = 10.77.0.2/24
#
# The names carry this shell's pid, so parallel runs (ctest -j) never meet; the addresses may be
# the same in every run, since each pair of namespaces is a network of its own. Needs root (or
# CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2; two_hosts_up returns 1 where either is missing.
#
#   two_hosts_up WORKDIR      create both hosts and the rsh agent (in WORKDIR); 1 if not permitted.
#                             First removes the hosts of runs whose shell no longer exists (killed
#                             with SIGKILL, e.g. by ctest's timeout, so that no trap ran)
#   two_hosts_down            kill every process left in either namespace, delete both (idempotent)
#   two_hosts_mpirun SECONDS ARGS...  mpirun, $two_hosts_per_host processes per host (2 unless
#                             set), started inside host A; killed (with its processes) after
#                             SECONDS, so nothing can hang
#   two_hosts_slow_link RATE LATENCY   tbf on both ends: at most RATE (e.g. 100mbit), packets
#                             queued for at most LATENCY (e.g. 20ms) before they are dropped
#   two_hosts_fast_link       removes the limit
#   two_hosts_cut             the link goes down on host B's side, as if its cable were pulled

ns_a=pt-a$$ ns_b=pt-b$$
veth_a=ptva$$ veth_b=ptvb$$  # at most 15 characters (pid_max is 7 digits)
addr_a=10.77.0.1 addr_b=10.77.0.2
two_hosts_agent=
two_hosts_per_host=${two_hosts_per_host:-2}

two_hosts_up() {
  local work=$1 stale pid pids
  command -v ip >/dev/null || { echo "ip (iproute2) not found"; return 1; }
  for stale in $(ip netns list 2>/dev/null | grep -oE '^pt-[ab][0-9]+'); do
    pid=${stale#pt-?}
    [ -e /proc/$pid ] && continue
    pids=$(ip netns pids "$stale" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$stale" 2>/dev/null
  done
  ip netns add "$ns_a" 2>/dev/null || { echo "cannot create a network namespace here (ip netns add: not root or not permitted)"; return 1; }
  ip netns add "$ns_b" || return 1
  ip link add "$veth_a" netns "$ns_a" type veth peer name "$veth_b" netns "$ns_b" || return 1
  ip -n "$ns_a" addr add $addr_a/24 dev "$veth_a" && ip -n "$ns_b" addr add $addr_b/24 dev "$veth_b" || return 1
  local ns
  for ns in "$ns_a" "$ns_b"; do ip -n "$ns" link set lo up || return 1; done
  ip -n "$ns_a" link set "$veth_a" up && ip -n "$ns_b" link set "$veth_b" up || return 1
  # After a link is cut, TCP gives up on unacknowledged data after tcp_retries2 retransmissions;
  # Linux's default (15) is about 15 minutes, and so long mpirun waits for the daemon of the lost
  # host (its "kill the job" message is such data), however fast the ranks themselves gave up.
  # 5 is about 13 s (RTO 0.2 s doubling): after pipetrain's own timeouts, so the ranks speak
  # first. Each namespace has its own setting; the host's is not touched.
  for ns in "$ns_a" "$ns_b"; do ip netns exec "$ns" sysctl -q -w net.ipv4.tcp_retries2=5 || return 1; done
  # Open MPI starts its daemon on each host with `AGENT HOST orted ...` (plm_rsh_agent); ours
  # "logs in" by entering that host's namespace instead of ssh, so no ssh is needed.
  two_hosts_agent=$work/agent.sh
  cat > "$two_hosts_agent" <<EOF
#!/bin/sh
case "\$1" in $addr_a) ns=$ns_a ;; $addr_b) ns=$ns_b ;; *) echo "agent: unknown host \$1" >&2; exit 1 ;; esac
shift
exec ip netns exec \$ns sh -c "\$*"
EOF
  chmod +x "$two_hosts_agent"
}

two_hosts_down() {
  local ns pids
  for ns in "$ns_a" "$ns_b"; do
    pids=$(ip netns pids "$ns" 2>/dev/null)
    [ -n "$pids" ] && kill -9 $pids 2>/dev/null
    ip netns del "$ns" 2>/dev/null  # deletes its end of the veth pair, and so the pair
  done
  return 0
}

# MPI over TCP only (btl self,tcp: no shared memory, also between the 2 processes of one host,
# so that every byte crosses a TCP socket), and Open MPI's own control traffic (oob) on the link
# too. With 2 per host, ranks 0,1 run on host A and 2,3 on host B (mpirun's default mapping by
# slot).
two_hosts_mpirun() {
  local limit=$1 n=$two_hosts_per_host; shift
  ip netns exec "$ns_a" timeout -k 5 "$limit" mpirun -np $((2 * n)) --host $addr_a:$n,$addr_b:$n --oversubscribe \
    --mca plm_rsh_agent "$two_hosts_agent" --mca btl self,tcp \
    --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 "$@"
}

two_hosts_slow_link() {
  tc -n "$ns_a" qdisc replace dev "$veth_a" root tbf rate "$1" burst 64kb latency "$2" &&
    tc -n "$ns_b" qdisc replace dev "$veth_b" root tbf rate "$1" burst 64kb latency "$2"
}

two_hosts_fast_link() {
  tc -n "$ns_a" qdisc del dev "$veth_a" root 2>/dev/null
  tc -n "$ns_b" qdisc del dev "$veth_b" root 2>/dev/null
  return 0
}

two_hosts_cut() {
  ip -n "$ns_b" link set "$veth_b" down
}
