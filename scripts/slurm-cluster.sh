#!/usr/bin/env bash
# A real two-node Slurm on this one machine, for the tests (scripts/test.sh brings one up) and by
# hand (docs/slurm.md, "A test cluster on one machine"):
#
#   scripts/slurm-cluster.sh up DIR                # installs Slurm if needed, starts it, prints DIR/env
#   source DIR/env && sinfo && srun -N2 hostname   # clients need only SLURM_CONF
#   scripts/slurm-cluster.sh status DIR            # daemons and nodes
#   scripts/slurm-cluster.sh kill-node DIR NODE    # SIGKILL one node's slurmd, steps and tasks
#   scripts/slurm-cluster.sh start-node DIR NODE   # start it again; it returns to service by itself
#   scripts/slurm-cluster.sh down DIR              # stops every daemon and job process it started
#
# `up` installs Debian's slurmctld, slurmd, slurm-client and munge (Slurm 22.05 on Debian 12) with
# apt-get where `sbatch` is missing (as root; their services are not started). Everything else is in
# DIR: a munge key and a munged of its own (own socket, pid file and log: a system munged is neither
# used nor touched), a generated slurm.conf, one slurmctld and two slurmd (nodes ddp-n1 and ddp-n2,
# both at 127.0.0.1 on ports picked free at `up`, so several clusters can run side by side), their
# state, spool, logs and pid files. The node names must resolve to 127.0.0.1 for the replicas'
# rendezvous (rank 0's host is the first node of SLURM_JOB_NODELIST): `up` adds them to /etc/hosts
# when they do not (as root; once). Accounting is off (no slurmdbd, so no sacct). `up` waits until
# sinfo lists both nodes idle, then writes and prints DIR/env; when it fails, it stops what it
# started.
#
# `down` stops the daemons by their pid files (SIGTERM, SIGKILL after 10 s) and, with SIGKILL,
# everything else of this cluster: step daemons (known by the node log in DIR/log they keep open),
# job processes and srun/salloc clients (SLURM_CONF=DIR/slurm.conf in their environment; a shell
# that sourced DIR/env is left alone), also those of a killed node.
#
# Works as any user once Slurm is installed (jobs then run as that user). Exit codes: 0 done; 1 a
# failure (the message names what and the log to read); 2 usage; 3 Slurm cannot be brought up here
# (not root and Slurm missing, no apt-get, the install failed, node names unresolvable): the
# message says why; nothing was started.
# Environment: SLURM_CLUSTER_TIMEOUT_S (default 60): how long `up` and `start-node` wait for each
# daemon and for the nodes to be idle.
set -euo pipefail

NODES=(ddp-n1 ddp-n2)
PARTITION="test"
MARKER=DDP_SLURM_CLUSTER
TIMEOUT_S=${SLURM_CLUSTER_TIMEOUT_S:-60}

say() { echo "slurm-cluster: $*" >&2; }
die() { echo "slurm-cluster: error: $*" >&2; exit 1; }
cannot() {
  echo "slurm-cluster: cannot bring up a Slurm cluster here: $*" >&2
  echo "slurm-cluster: nothing was started (the tests that need a real Slurm skip without it)" >&2
  exit 3
}
usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ $# -ge 2 ] || usage
cmd=$1
if [ "$cmd" = up ]; then
  mkdir -p -- "$2" 2>/dev/null || die "cannot create the cluster folder $2"
fi
[ -d "$2" ] || die "no cluster folder $2 (scripts/slurm-cluster.sh up $2 makes one)"
DIR=$(cd -- "$2" && pwd -P)
shift 2

CONF=$DIR/slurm.conf
MUNGE_SOCKET=$DIR/munge/munge.socket.2
# A unix socket path holds at most 107 bytes.
[ ${#MUNGE_SOCKET} -lt 100 ] || die "the cluster folder's path is too long for munge's socket ($MUNGE_SOCKET): choose a shorter one"

# Slurm's daemons are in /usr/sbin, which is not on every user's PATH.
PATH=$PATH:/usr/sbin:/sbin
export PATH

pid_of() { # pid file -> the pid, when that process is running (not a zombie)
  local pid state
  [ -s "$1" ] || return 1
  { read -r pid <"$1" && read -r _ _ state _ <"/proc/$pid/stat"; } 2>/dev/null || return 1
  [[ $pid =~ ^[0-9]+$ ]] && [ "$state" != Z ] && echo "$pid"
}

# Waits up to TIMEOUT_S for `check` to succeed; else fails naming `what` and where to look.
wait_until() { # what log check...
  local what=$1 log=$2 deadline=$((SECONDS + TIMEOUT_S))
  shift 2
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      say "waited ${TIMEOUT_S}s for $what; last lines of $log:"
      tail -n 20 "$log" >&2 2>/dev/null || true
      die "timed out waiting for $what (SLURM_CLUSTER_TIMEOUT_S changes the limit)"
    fi
    sleep 0.2
  done
}

# --- up -------------------------------------------------------------------------------------------

install_packages() {
  local missing=() tool
  for tool in sbatch srun sinfo squeue scontrol slurmctld slurmd munged munge; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || cannot "${missing[*]} missing and not root, so they cannot be installed (as root: apt-get install slurmctld slurmd slurm-client munge)"
  command -v apt-get >/dev/null 2>&1 || cannot "${missing[*]} missing and there is no apt-get to install slurmctld, slurmd, slurm-client and munge"
  local log=$DIR/install.log policy=/usr/sbin/policy-rc.d added_policy=""
  say "installing slurmctld slurmd slurm-client munge with apt-get (log: $log)"
  # The packages would start their system services where an init system runs; this cluster runs
  # its own daemons, so a policy that forbids starting services is in place during the install.
  if [ ! -e $policy ]; then
    printf '#!/bin/sh\nexit 101\n' >$policy && chmod 755 $policy && added_policy=1
  fi
  local apt=(env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o Dpkg::Use-Pty=0 install --no-install-recommends
    slurmctld slurmd slurm-client munge)
  local ok=""
  if "${apt[@]}" >"$log" 2>&1 || { apt-get -q update >>"$log" 2>&1 && "${apt[@]}" >>"$log" 2>&1; }; then ok=1; fi
  [ -z "$added_policy" ] || rm -f $policy
  if [ -z "$ok" ]; then
    tail -n 15 "$log" >&2
    cannot "apt-get could not install slurmctld slurmd slurm-client munge (see $log)"
  fi
  for tool in "${missing[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || cannot "$tool is still missing after installing the packages (see $log)"
  done
}

# The node names resolve to 127.0.0.1 (added to /etc/hosts when they do not, as root).
resolve_nodes() {
  local node addr unresolved=()
  for node in "${NODES[@]}"; do
    addr=$(getent ahostsv4 "$node" 2>/dev/null | awk 'NR==1 {print $1}') || true
    if [ -z "$addr" ]; then
      unresolved+=("$node")
    elif [ "$addr" != 127.0.0.1 ]; then
      cannot "the node name $node resolves to $addr, not 127.0.0.1 (see /etc/hosts)"
    fi
  done
  [ ${#unresolved[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || cannot "the node names ${unresolved[*]} do not resolve and only root can add them to /etc/hosts (add: 127.0.0.1 ${NODES[*]})"
  echo "127.0.0.1 ${unresolved[*]}  # test Slurm nodes (scripts/slurm-cluster.sh)" >>/etc/hosts \
    || cannot "cannot add ${unresolved[*]} to /etc/hosts"
  say "added ${unresolved[*]} to /etc/hosts (127.0.0.1)"
  for node in "${unresolved[@]}"; do
    [ "$(getent ahostsv4 "$node" | awk 'NR==1 {print $1}')" = 127.0.0.1 ] \
      || cannot "$node still does not resolve to 127.0.0.1 after adding it to /etc/hosts"
  done
}

# A port nothing listens on, outside the ephemeral range and away from the trainer's default 29500.
free_port() {
  local port
  for _ in $(seq 200); do
    port=$((10000 + RANDOM % 19000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && [[ " ${PORTS[*]:-} " != *" $port "* ]]; then
      echo "$port"
      return 0
    fi
  done
  die "found no free TCP port on 127.0.0.1 in 10000-28999"
}

write_conf() {
  local user host ctld_port n1_port n2_port
  user=$(id -un)
  host=$(hostname -s)
  PORTS=()
  ctld_port=$(free_port); PORTS+=("$ctld_port")
  n1_port=$(free_port); PORTS+=("$n1_port")
  n2_port=$(free_port); PORTS+=("$n2_port")
  cat >"$CONF" <<EOF
# A two-node test cluster on one machine, written by scripts/slurm-cluster.sh (docs/slurm.md).
ClusterName=ddptest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmUser=$user
SlurmdUser=$user
# Its own munged, so the system's (if any) is neither used nor needed. cred_expire=10: a requeued
# job may start again 10 s after it ended (Slurm waits for its old credentials to expire; 120 s by
# default).
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
# Processes are tracked by their parent pids and tasks are not bound to CPUs: no cgroups needed.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
JobRequeue=1
# No accounting (no slurmdbd): sacct has nothing to say about this cluster's jobs.
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# The node lines below are taken as they are, whatever this machine's CPUs and memory.
SlurmdParameters=config_overrides
# The submitting shell's limits (open files, stack...) are not applied to the tasks.
PropagateResourceLimits=NONE
# Timeouts for tests:
# a node that does not answer for 15 s is DOWN (default 300 s): a killed slurmd is a node failure
# within about 20 s, and a loaded 2-core machine is not mistaken for a dead one;
SlurmdTimeout=15
# pending jobs are looked at every 2 s (default: 60 s for the main loop, 30 s for backfill): a
# requeued job starts again as soon as it may (its old credentials expired), not up to a minute later;
SchedulerParameters=sched_interval=2,bf_interval=2
# a node that was DOWN takes jobs again as soon as its slurmd registers (start-node);
ReturnToService=2
# a finished job stays visible to squeue --states=all and scontrol for 60 s (default 300 s):
# without accounting that is where a poller sees how it ended;
MinJobAge=60
# SIGTERM to SIGKILL when a job is cancelled, requeued or reaches its time limit: 10 s (default
# 30 s), time enough for a replica to finish its step and write a checkpoint;
KillWait=10
# a job is killed at its time limit, with no grace (default 0, said here on purpose);
OverTimeLimit=0
# srun does not kill a job whose srun went away (default 0, said here on purpose);
InactiveLimit=0
# srun waits for all its tasks, however long after the first one ended (default 0, said here);
WaitTime=0
# a node whose step does not die within 30 s after SIGKILL is drained (default 60 s).
UnkillableStepTimeout=30
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=${NODES[0]} NodeHostname=$host NodeAddr=127.0.0.1 Port=$n1_port CPUs=2 RealMemory=2000 State=UNKNOWN
NodeName=${NODES[1]} NodeHostname=$host NodeAddr=127.0.0.1 Port=$n2_port CPUs=2 RealMemory=2000 State=UNKNOWN
PartitionName=$PARTITION Nodes=${NODES[0]},${NODES[1]} Default=YES MaxTime=INFINITE State=UP
EOF
}

start_munged() {
  local log=$DIR/log/munged.log
  mkdir -p "$DIR/munge"
  # clients of other users need to reach the socket; the key itself is readable by this user only
  chmod 755 "$DIR/munge"
  (umask 077 && dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1024 count=1 status=none)
  env "$MARKER=$DIR" munged --force \
    --key-file="$DIR/munge/munge.key" --socket="$MUNGE_SOCKET" \
    --pid-file="$DIR/run/munged.pid" --log-file="$log" --seed-file="$DIR/munge/munged.seed" \
    >>"$log" 2>&1 || { tail -n 20 "$log" >&2; die "munged did not start (log: $log)"; }
  # shellcheck disable=SC2016 # the inner shell expands $1
  wait_until "munged to answer on $MUNGE_SOCKET" "$log" \
    bash -c 'munge -n -S "$1" | unmunge -S "$1"' _ "$MUNGE_SOCKET"
}

start_slurmd() { # node
  local node=$1 log=$DIR/log/slurmd-$1.log
  mkdir -p "$DIR/spool/$node"
  env "$MARKER=$DIR" SLURM_CONF="$CONF" slurmd -N "$node" -f "$CONF" >>"$DIR/log/slurmd-$node.start.log" 2>&1 \
    || { tail -n 20 "$DIR/log/slurmd-$node.start.log" "$log" >&2 2>/dev/null; die "slurmd -N $node did not start (log: $log)"; }
  wait_until "slurmd of $node to write $DIR/run/slurmd-$node.pid" "$log" pid_of "$DIR/run/slurmd-$node.pid"
}

# The state of every node, as sinfo lists them: "ddp-n1 idle".
node_states() { SLURM_CONF=$CONF sinfo --noheader --Node --format='%N %T' 2>/dev/null; }
nodes_idle() { # node...: each listed as idle
  local states node
  states=$(node_states) || return 1
  for node in "$@"; do
    grep -qx "$node idle" <<<"$states" || return 1
  done
}

write_env() {
  cat >"$DIR/env" <<EOF
# The environment of this test cluster's clients (sinfo, srun, sbatch, squeue, scontrol, scancel):
# source it. Written by scripts/slurm-cluster.sh up.
export SLURM_CONF=$CONF
EOF
}

up() {
  if pid_of "$DIR/run/slurmctld.pid" >/dev/null; then
    die "a cluster is already running in $DIR (scripts/slurm-cluster.sh down $DIR stops it)"
  fi
  local started=$SECONDS
  # a failed `up` stops what it started
  trap 'down >/dev/null 2>&1 || true' EXIT
  install_packages
  resolve_nodes
  # A fresh cluster: no state, jobs or logs of an earlier one in this folder.
  rm -rf "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log" "$DIR/munge" "$DIR/env"
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/run" "$DIR/log"
  write_conf
  start_munged
  env "$MARKER=$DIR" SLURM_CONF="$CONF" slurmctld -f "$CONF" >>"$DIR/log/slurmctld.start.log" 2>&1 \
    || { tail -n 20 "$DIR/log/slurmctld.start.log" "$DIR/log/slurmctld.log" >&2 2>/dev/null; die "slurmctld did not start (log: $DIR/log/slurmctld.log)"; }
  wait_until "slurmctld to write its pid file" "$DIR/log/slurmctld.log" pid_of "$DIR/run/slurmctld.pid"
  local node
  for node in "${NODES[@]}"; do start_slurmd "$node"; done
  wait_until "sinfo to list ${NODES[*]} as idle" "$DIR/log/slurmctld.log" nodes_idle "${NODES[@]}"
  write_env
  trap - EXIT
  say "up in $((SECONDS - started))s: nodes ${NODES[*]} idle in partition $PARTITION; source $DIR/env"
  cat "$DIR/env"
}

# --- down -----------------------------------------------------------------------------------------

# Pids of the processes of this cluster, but for the daemons with pid files: the step daemons
# (they overwrite their environment with their title but keep their node's log in DIR/log open), the
# jobs' processes (this cluster's SLURM_CONF and a SLURM_JOB_ID in their environment) and the srun and
# salloc clients of this cluster (they wait for its daemons forever once those are gone). Also a
# daemon without a pid file: this cluster's marker in its environment.
# With a NODE: only the step daemons and job processes of that node (a node failure kills them).
cluster_pids() {
  local node=${1:-} p pid comm state var env=() mine job fd on
  local log="$DIR/log/"
  [ -z "$node" ] || log="$DIR/log/slurmd-$node.log"
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    { [ "$pid" = $$ ] || [ "$pid" = "$BASHPID" ]; } && continue
    { read -r comm <"$p/comm" && read -r _ _ state _ <"$p/stat"; } 2>/dev/null || continue
    # a zombie is gone already (only its parent's wait is missing)
    [ "$state" = Z ] && continue
    if [ "$comm" = slurmstepd ]; then
      for fd in "$p"/fd/*; do
        if [[ $(readlink "$fd" 2>/dev/null) == "$log"* ]]; then
          echo "$pid"
          break
        fi
      done
      continue
    fi
    { mapfile -d '' -t env <"$p/environ"; } 2>/dev/null || continue
    mine="" job="" on=""
    for var in "${env[@]}"; do
      case $var in
        "$MARKER=$DIR") mine=daemon ;;
        "SLURM_CONF=$CONF") mine=${mine:-client} ;;
        SLURM_JOB_ID=*) job=1 ;;
        "SLURMD_NODENAME=$node") on=1 ;;
      esac
    done
    if [ -n "$node" ]; then
      [ "$mine" = client ] && [ -n "$job" ] && [ -n "$on" ] && echo "$pid"
      continue
    fi
    case $mine in
      daemon) echo "$pid" ;;
      client) [ -n "$job" ] || [ "$comm" = srun ] || [ "$comm" = salloc ] && echo "$pid" ;;
    esac
  done
  return 0
}

# Of the given pids, those still running (not zombies).
running() {
  local pid state
  for pid in "$@"; do
    { read -r _ _ state _ <"/proc/$pid/stat"; } 2>/dev/null || continue
    [ "$state" != Z ] && echo "$pid"
  done
  return 0
}

down() {
  local daemons=() others=() left=() f pid
  for f in "$DIR"/run/slurmd-*.pid "$DIR/run/slurmctld.pid" "$DIR/run/munged.pid"; do
    pid=$(pid_of "$f") && daemons+=("$pid")
  done
  mapfile -t others < <(cluster_pids | grep -vxF -f <(printf '%s\n' "${daemons[@]:-none}") || true)
  local n=$((${#daemons[@]} + ${#others[@]}))
  if [ $n -eq 0 ]; then
    rm -f "$DIR"/run/*.pid
    say "nothing of the cluster in $DIR is running"
    return 0
  fi
  # The jobs and step daemons first, with SIGKILL (a test cluster keeps nothing), so the daemons
  # have nothing left to clean up; then the daemons by their pid files, SIGTERM then SIGKILL.
  [ ${#others[@]} -eq 0 ] || kill -KILL "${others[@]}" 2>/dev/null || true
  [ ${#daemons[@]} -eq 0 ] || kill -TERM "${daemons[@]}" 2>/dev/null || true
  local deadline=$((SECONDS + 10))
  while mapfile -t left < <(running "${daemons[@]}" "${others[@]}") && [ ${#left[@]} -gt 0 ]; do
    if [ $SECONDS -ge $deadline ]; then
      say "killing what did not stop within 10s of SIGTERM: ${left[*]}"
      kill -KILL "${left[@]}" 2>/dev/null || true
      break
    fi
    sleep 0.2
  done
  # and what a dying daemon started meanwhile
  deadline=$((SECONDS + 5))
  while mapfile -t left < <(running "${daemons[@]}"; cluster_pids) && [ ${#left[@]} -gt 0 ]; do
    [ $SECONDS -lt $deadline ] || die "processes of the cluster in $DIR survived SIGKILL: ${left[*]}"
    kill -KILL "${left[@]}" 2>/dev/null || true
    sleep 0.2
  done
  rm -f "$DIR"/run/*.pid
  say "stopped the cluster in $DIR ($n processes)"
}

# --- status, nodes --------------------------------------------------------------------------------

status() {
  local f pid name up=0
  for f in "$DIR/run/munged.pid" "$DIR/run/slurmctld.pid" "$DIR"/run/slurmd-*.pid; do
    [ -e "$f" ] || continue
    name=$(basename "$f" .pid)
    if pid=$(pid_of "$f"); then echo "$name running (pid $pid)"; up=1; else echo "$name stopped"; fi
  done
  [ $up = 1 ] || { echo "no daemon of a cluster in $DIR is running"; return 1; }
  pid_of "$DIR/run/slurmctld.pid" >/dev/null || return 1
  SLURM_CONF=$CONF sinfo --Node --format='%N %T %E'
  SLURM_CONF=$CONF squeue
}

node_arg() { # node name -> checked
  local node
  for node in "${NODES[@]}"; do [ "$1" = "$node" ] && return 0; done
  die "no node $1 in this cluster (its nodes: ${NODES[*]})"
}

case $cmd in
  up) [ $# -eq 0 ] || usage; up ;;
  down) [ $# -eq 0 ] || usage; down ;;
  status) [ $# -eq 0 ] || usage; status ;;
  kill-node)
    [ $# -eq 1 ] || usage; node_arg "$1"
    pid=$(pid_of "$DIR/run/slurmd-$1.pid") || die "the slurmd of $1 is not running"
    # A node failure: its slurmd, step daemons and job processes die together (a step daemon
    # outlives its slurmd, so killing the slurmd alone lets the node's tasks finish the job).
    mapfile -t others < <(cluster_pids "$1")
    kill -KILL "$pid" "${others[@]}" 2>/dev/null || true
    say "killed the slurmd of $1 (pid $pid) and its ${#others[@]} step and job processes"
    ;;
  start-node)
    [ $# -eq 1 ] || usage; node_arg "$1"
    ! pid_of "$DIR/run/slurmd-$1.pid" >/dev/null || die "the slurmd of $1 is running already"
    [ -s "$CONF" ] || die "no cluster in $DIR (scripts/slurm-cluster.sh up $DIR starts one)"
    pid_of "$DIR/run/slurmctld.pid" >/dev/null || die "the slurmctld of $DIR is not running"
    start_slurmd "$1"
    say "started the slurmd of $1"
    ;;
  *) usage ;;
esac
