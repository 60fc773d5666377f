#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests and for trying pipetrain under Slurm:
# munge, the controller (slurmctld) and the node daemon (slurmd) with this machine's CPUs as they
# are, every file (configuration, keys, state, logs, sockets) in one folder, and nothing left
# behind when it stops. Debian 12 packages: slurmctld slurmd slurm-client munge (install-deps.sh).
#
#   slurm-local.sh start DIR   starts the cluster with its files in DIR (created; must not hold
#                              a running cluster) and waits until the node takes jobs; then run
#                              Slurm's commands with SLURM_CONF=DIR/slurm.conf
#   slurm-local.sh stop DIR    stops it: every job's processes, the daemons, munge; removes DIR
#
# Root only (slurmd starts jobs as their user, and the daemons run as root here: SlurmUser=root).
# It uses no system paths (no /etc/slurm, /run/munge, /var/spool): a cluster already running on
# the machine is left alone, and several of these can run side by side on other ports.
# Every process of the cluster carries PIPETRAIN_SLURM_LOCAL=DIR in its environment (Slurm
# passes the submitting environment on to jobs), which is how `stop` finds what to end.
set -uo pipefail

# Run with a clean environment: a caller that exported PIPETRAIN_SLURM_LOCAL (to use the cluster)
# would otherwise make this script, and its subshells, look like the cluster's own processes.
[ -n "${PIPETRAIN_SLURM_LOCAL:-}" ] && exec env -u PIPETRAIN_SLURM_LOCAL bash "$0" "$@"

usage() { echo "usage: $0 start|stop DIR" >&2; exit 2; }
[ $# -eq 2 ] || usage
cmd=$1
dir=$2
case $dir in /*) ;; *) dir=$(pwd)/$dir ;; esac

# The pids of every process of this cluster, this script's own excepted: those whose environment
# names it, and the step daemons working in its folder (slurmstepd overwrites its environment
# with its title, but keeps the folder slurmd started in).
cluster_pids() {
  local p cwd
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [ "$p" = $$ ] && continue
    if [ "$(cat "/proc/$p/comm" 2>/dev/null)" = slurmstepd ]; then
      cwd=$(readlink "/proc/$p/cwd" 2>/dev/null)
      case "$cwd" in "$dir" | "$dir/"* | "$dir (deleted)" | "$dir/"*" (deleted)") echo "$p"; continue ;; esac
    fi
    tr '\0' '\n' 2>/dev/null < "/proc/$p/environ" | grep -qxF "PIPETRAIN_SLURM_LOCAL=$dir" && echo "$p"
  done
}

# wait_until SECONDS command...: polls every 0.2 s; false when the time runs out.
wait_until() {
  local end=$((SECONDS + $1)); shift
  until "$@"; do [ $SECONDS -ge $end ] && return 1; sleep 0.2; done
}

no_cluster_left() { [ -z "$(cluster_pids)" ]; }

stop() {
  [ -f "$dir/slurm.conf" ] || { echo "slurm-local: $dir holds no cluster (no slurm.conf): nothing to stop" >&2; return 0; }
  # Jobs first (their steps get SIGTERM, then SIGKILL after KillWait), then the daemons, politely;
  # whatever is left after 10 s is killed.
  SLURM_CONF=$dir/slurm.conf timeout 5 scancel --full --quiet --user=root 2>/dev/null
  no_jobs() { [ -z "$(SLURM_CONF=$dir/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null)" ]; }
  wait_until 10 no_jobs  # the step daemons report to slurmd before it goes
  local pid f
  for f in slurmctld slurmd munged; do
    pid=$(cat "$dir/$f.pid" 2>/dev/null) && kill -TERM "$pid" 2>/dev/null
  done
  if ! wait_until 10 no_cluster_left; then
    for pid in $(cluster_pids); do kill -KILL "$pid" 2>/dev/null; done
    wait_until 5 no_cluster_left || echo "slurm-local: processes of $dir outlived SIGKILL: $(cluster_pids)" >&2
  fi
  rm -rf "$dir"
}

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

start() {
  [ "$(id -u)" = 0 ] || { echo "slurm-local: needs root (slurmd runs jobs as their user): run it with sudo" >&2; exit 2; }
  local missing=() c
  for c in munged slurmctld slurmd srun sinfo scancel python3; do command -v $c >/dev/null || missing+=("$c"); done
  ((${#missing[@]} == 0)) || { echo "slurm-local: not found: ${missing[*]}; install Debian's munge slurmctld slurmd slurm-client (scripts/install-deps.sh)" >&2; exit 2; }
  if [ -e "$dir/slurm.conf" ] && [ -n "$(cluster_pids)" ]; then
    echo "slurm-local: a cluster is already running in $dir; stop it first: $0 stop $dir" >&2; exit 2
  fi
  mkdir -p "$dir"/{state,spool,munge} && chmod 700 "$dir" "$dir/munge"
  cd "$dir" || exit 1  # the daemons, and the step daemons slurmd starts, work here (see cluster_pids)
  export PIPETRAIN_SLURM_LOCAL=$dir
  # A fresh munge key for this cluster alone, readable by its owner only (munged insists).
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none && chmod 400 "$dir/munge/munge.key"
  # --force: munged refuses to start as root, or with its files under /tmp, without it.
  munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
    --pid-file="$dir/munged.pid" --log-file="$dir/munged.log" --seed-file="$dir/munge/seed" ||
    { echo "slurm-local: munged did not start: $(tail -3 "$dir/munged.log" 2>/dev/null)" >&2; stop; exit 1; }

  local node ctld_port node_port cpus
  node=$(hostname -s)
  ctld_port=$(free_port)
  node_port=$(free_port)
  cpus=$(nproc)
  local first_job_id=$(( (RANDOM % 9000 + 1000) * 1000 ))
  cat > "$dir/slurm.conf" <<EOF
# Written by scripts/slurm-local.sh: a one-node cluster whose files are all in $dir.
ClusterName=pipetrain-local
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$node_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
# No cgroups (containers rarely allow them): processes are tracked by process group.
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/builtin
# Job ids of their own: Slurm's PMIx plugin keeps per-step folders in /tmp named by job id, which
# two of these clusters running at once would otherwise share.
FirstJobId=$first_job_id
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
# How long a job's processes get between SIGTERM and SIGKILL when it is cancelled or runs out of
# time (Slurm's default is 30 s; the tests override nothing here).
KillWait=30
# A node's daemon that stops answering is marked down after this long.
SlurmdTimeout=60
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=local Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
EOF
  export SLURM_CONF=$dir/slurm.conf
  slurmctld -i || { echo "slurm-local: slurmctld did not start: $(tail -5 "$dir/slurmctld.log" 2>/dev/null)" >&2; stop; exit 1; }
  mkdir -p "$dir/spool/$node"
  slurmd -N "$node" || { echo "slurm-local: slurmd did not start: $(tail -5 "$dir/slurmd.log" 2>/dev/null)" >&2; stop; exit 1; }
  node_idle() { sinfo -h -n "$node" -o %t 2>/dev/null | grep -qx idle; }
  if ! wait_until 30 node_idle; then
    echo "slurm-local: the node did not become idle within 30 s (sinfo: $(sinfo -h -o '%n %t %E' 2>&1)); logs:" >&2
    tail -5 "$dir/slurmctld.log" "$dir/slurmd.log" >&2
    stop
    exit 1
  fi
  echo "slurm-local: one node ($node, $cpus CPUs) ready; use it with SLURM_CONF=$dir/slurm.conf"
}

case $cmd in
  start) start ;;
  stop) stop ;;
  *) usage ;;
esac
