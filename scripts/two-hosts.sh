#!/usr/bin/env bash
# Two "hosts" on this machine joined by a link of known speed: network namespaces NAME0 and NAME1
# (10.77.0.1 and 10.77.0.2), a veth pair between them shaped with tc's token bucket in each
# direction. Commands run in a host get its own UTS namespace with its own host name, so that
# ddp (and PyTorch) see two machines: the ring carries the gradients, not shared memory.
# Needs root (ip netns, tc), as CI has.
#
#   scripts/two-hosts.sh up [RATE]         # RATE: tc rate, e.g. 200mbit, 1gbit (default),
#                                          #   or "none" (unshaped veth)
#   scripts/two-hosts.sh run H CMD ARGS... # runs CMD in host H (0 or 1), host name $NAME$H
#   scripts/two-hosts.sh rate RATE         # reshapes the link of hosts that are up
#   scripts/two-hosts.sh down
#
# NAME is $DDP_HOSTS_NAME (default ddphost). The addresses are 10.77.$DDP_HOSTS_NET.{1,2}
# (DDP_HOSTS_NET default 0): give concurrent users their own NAME and NET.
set -euo pipefail

name=${DDP_HOSTS_NAME:-ddphost}
net=${DDP_HOSTS_NET:-0}
die() { echo "two-hosts: error: $*" >&2; exit 2; }

[[ $(id -u) == 0 ]] || die "network namespaces need root (run as root, as CI does)"
command -v ip >/dev/null || die "ip (iproute2) is not installed: apt-get install iproute2"

addr() { echo "10.77.$net.$(($1 + 1))"; }

shape() {
  local rate=$1 h
  for h in 0 1; do
    ip netns exec "$name$h" tc qdisc del dev "v$name$h" root 2>/dev/null || true
    if [[ $rate != none ]]; then
      # A bucket of 1 ms at the rate (at least 32 KiB), a queue of 50 ms: TCP sees the rate,
      # not drops.
      ip netns exec "$name$h" tc qdisc add dev "v$name$h" root tbf rate "$rate" \
        burst 256kbit latency 50ms
    fi
  done
}

case ${1:-} in
  up)
    rate=${2:-1gbit}
    "$0" down 2>/dev/null || true
    for h in 0 1; do ip netns add "$name$h"; done
    ip link add "v${name}0" type veth peer name "v${name}1"
    for h in 0 1; do
      ip link set "v$name$h" netns "$name$h"
      ip netns exec "$name$h" ip addr add "$(addr $h)/24" dev "v$name$h"
      ip netns exec "$name$h" ip link set "v$name$h" up
      ip netns exec "$name$h" ip link set lo up
    done
    shape "$rate"
    echo "two-hosts: ${name}0 $(addr 0) <-> ${name}1 $(addr 1), $rate each way" >&2
    ;;
  rate)
    [[ -n ${2:-} ]] || die "usage: two-hosts.sh rate RATE"
    shape "$2"
    ;;
  run)
    h=${2:-}
    [[ $h == 0 || $h == 1 ]] || die "usage: two-hosts.sh run 0|1 CMD ARGS..."
    shift 2
    [[ $# -gt 0 ]] || die "usage: two-hosts.sh run 0|1 CMD ARGS..."
    exec ip netns exec "$name$h" unshare --uts -- sh -c 'hostname "$0" && exec "$@"' "$name$h" "$@"
    ;;
  down)
    for h in 0 1; do ip netns del "$name$h" 2>/dev/null || true; done
    ;;
  addr)
    addr "${2:-0}"
    ;;
  *)
    die "usage: two-hosts.sh up [RATE] | run H CMD... | rate RATE | addr H | down"
    ;;
esac
