#!/usr/bin/env bash
# scripts/testbed.sh — an emulated multi-host cluster on one machine, for Open MPI runs.
#
#   scripts/testbed.sh up --hosts N [--rate 1gbit[,RATE2]] [--ranks-per-host R] [--nics 1|2]
#                         [--subnet 10.77.X] [--burst BYTES[,BYTES2]] [--mtu BYTES] [--docker]
#                         [--cc cubic|bbr|reno|host]
#   scripts/testbed.sh run [--mca K V]... [-x VAR[=VAL]]... [--np N] [--net 1|2|both|default]
#                          [--tcp-only] [--timeout S] -- CMD [ARGS...]
#   scripts/testbed.sh status | down | probe
#   (every command takes --name NAME to keep several testbeds apart; default "gs")
#
# What "up" builds (root only; nothing leaves the machine):
#   * host i = network namespace NAME-hI with its own UTS namespace (hostname NAME-hI), its
#     own /dev/shm (private tmpfs), its own /etc/hosts (the testbed's names, via
#     /etc/netns/NAME-hI/hosts) and its own TMPDIR (/tmp/gradsync-testbed-NAME/hI). A
#     long-lived holder process (`sleep infinity`) keeps these namespaces; commands enter
#     them with `nsenter -t <holder> -n -u -m`.
#   * NIC eth0 of every host is a veth into bridge NAME-br0 in the root namespace, address
#     SUBNET.(i+1)/24 (default subnet 10.77.0). `--nics 2` adds eth1 on bridge NAME-br1,
#     subnet SUBNET+1 (default 10.77.1), e.g. for NCCL_SOCKET_IFNAME=eth1 or
#     `run --net 2`. The bridges have no address: the root namespace is not on the network.
#   * Bandwidth: `tc qdisc ... root tbf rate RATE` on both ends of every veth, i.e. on
#     what a host sends and on what it receives (`--rate none`: unshaped). One rate applies
#     to every NIC; two (`--rate 1gbit,200mbit`) give eth0 and eth1 their own (two rates
#     imply `--nics 2`; `--burst` takes one value or one per NIC likewise). The kernel here
#     has no netem, so latency is what the stack gives (tens of microseconds). The token
#     bucket's burst (default 1 ms at RATE, at least 64 KiB; --burst) passes at full speed:
#     messages smaller than about the burst are not slowed; large ones see RATE.
#   * `--mtu BYTES` (default 1500, Ethernet's; 9000: jumbo frames) on every NIC, veth and
#     bridge. It sets how much of the shaped rate TCP can carry: at 1500 every 1448 bytes of
#     payload travel in a 1502-1514-byte frame, and where a connection carries data one way
#     only (a ring of 3 or more hosts), its pure ACKs take the other direction's frames too;
#     a 3-host ring measured 93.2-94.1% of the rate at 1500 and 97.4-97.8% at 9000
#     (200 Mbit/s, 16-64 MiB, 2026-12-03).
#   * `--cc NAME` (default cubic, Linux's own default): the hosts' TCP congestion control
#     (net.ipv4.tcp_congestion_control in each namespace); `host` keeps what this machine
#     gives a new namespace. A namespace may only pick one the machine allows, so up adds
#     NAME to net.ipv4.tcp_allowed_congestion_control (machine-wide, until reboot) when it is
#     missing there, and says so. Why it matters: a machine's default may be bbr (the one
#     these figures come from had it), and BBR drops a connection that has been sending
#     without a pause for 10 s to 4 packets in flight for 200 ms (PROBE_RTT) to re-measure
#     the path's round trip. A 3-host ring of 256 MiB all-reduces lost about 190 ms in
#     most iterations (85-91% of the line); with cubic every iteration reached 95.2-95.4%
#     (2026-12-05, README "Measured defaults"). Result files record each rank's congestion
#     control (/net/tcp_congestion_control).
#   * `--docker`: what Docker leaves on a host, for interface-choice experiments
#     (NCCL_SOCKET_IFNAME, btl_tcp_if_include): a bridge docker0 inside every host with the
#     SAME address on every host (172.17.0.1/16), up but connected to nothing (no port),
#     so 172.17.0.0/16 looks like a network every host is on, and no host can reach another
#     through it.
#
# What "run" does: mpirun is started inside host 0 (it is the launch node, like a login
# node running mpirun) with a hostfile of the host addresses (slots=R), and Open MPI's rsh
# launcher points at a generated agent (STATE/agent) that starts orted inside the target
# host's namespaces instead of ssh. Defaults given to mpirun:
#   --mca plm rsh --mca plm_rsh_agent STATE/agent --mca plm_rsh_no_tree_spawn 1
#   --mca oob_tcp_if_include SUBNET.0/24 --mca btl_tcp_if_include <subnet of --net>
#   --mca pml ob1 --mca btl self,vader,tcp --bind-to none --oversubscribe
#   --mca mpi_yield_when_idle 1 when --np is above this machine's cores (nproc): the hosts
#     share those cores, and a rank polling for its messages would take the core another
#     host's rank or the kernel's TCP work needs, which separate machines would not.
#     Measured 2026-12-05 (3 hosts, 1 Gbit/s, ring, 16 / 64 MiB, 2 vCPUs): 85-93% of the
#     line polling, 95.0-95.5% yielding (README "Measured defaults").
# `--net default` sets no btl_tcp_if_include (nor btl_tcp_if_exclude): the TCP BTL then uses
# every interface but loopback, as Open MPI does on a real host (the data path is left to
# Open MPI; the launch plumbing, oob_tcp_if_include, stays on eth0's subnet). Seen with Open
# MPI 4.1.4 (experiments/README.md, seed-ifname): with --docker the job hangs (a rank connects
# to its own docker0, 172.17.0.1); without docker0, gradsync's ring (eager chunks) sent all
# over eth1, MPI_Allreduce's large messages split about evenly over eth0 and eth1.
# BTL choice: ranks on different hosts can only use tcp (Open MPI's locality is per orted,
# and each host has its own /dev/shm, so vader cannot cross hosts); ranks on the same host
# use vader, as on a real cluster. `--tcp-only` gives `--mca btl self,tcp` so that even
# same-host ranks go through TCP (to their own host address: the kernel keeps that traffic
# local, it does not cross the shaped link).
# Any `--mca K V` given to run replaces the default for K (e.g. `--mca btl_tcp_links 2`
# is passed through). The mpirun line is printed on stderr before it starts.
# Commands see GS_TESTBED_NAME, GS_TESTBED_HOST (host index) and TMPDIR of their host.
#
# State lives in /run/gradsync-testbed/NAME (config.env, hosts, hostfile, agent); it is
# what status/run/down read. "up" when the same testbed is up already is a no-op; "down"
# when nothing is up is fine, and it also removes the leftovers of a failed "up".
#
# Needs: root; iproute2 (ip, tc), util-linux (nsenter, unshare); Open MPI (mpirun) for run;
# a kernel with network namespaces, veth, bridge and the tbf qdisc ("probe" checks).
# Debian packages: iproute2 util-linux openmpi-bin.
#
# Exit status: 0 ok; 1 failure; 2 bad usage; 3 not root, a tool or a kernel feature missing.

set -euo pipefail

PROG=testbed.sh
STATE_ROOT=${GS_TESTBED_STATE_ROOT:-/run/gradsync-testbed}
NAME=${GS_TESTBED_NAME:-gs}

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $*" >&2; echo "Try '$PROG help'." >&2; exit 2; }
missing() { echo "$PROG: cannot run here: $*" >&2; exit 3; }
say() { echo "$PROG: $*" >&2; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'
}

# ---- names and state -------------------------------------------------------------------
set_names() {
  [[ $NAME =~ ^[a-z][a-z0-9]{0,5}$ ]] ||
    usage_error "--name must be 1-6 characters [a-z0-9] starting with a letter (got '$NAME')"
  STATE=$STATE_ROOT/$NAME
  TMPROOT=/tmp/gradsync-testbed-$NAME
}
ns_name() { echo "$NAME-h$1"; }               # namespace and hostname of host $1
veth_name() { echo "$NAME-h$1n$2"; }          # root-side end of host $1's NIC $2 (<= 12 chars)
bridge_name() { echo "$NAME-br$1"; }

need_root() {
  [[ $(id -u) -eq 0 ]] || missing "must run as root (network namespaces, veth, tc)"
}
need_tools() {
  local t miss=()
  for t in "$@"; do command -v "$t" >/dev/null 2>&1 || miss+=("$t"); done
  ((${#miss[@]} == 0)) && return 0
  missing "command(s) not found: ${miss[*]} (Debian packages: iproute2 util-linux openmpi-bin)"
}

# probe_kernel: creates a throw-away namespace, veth pair, bridge and tbf qdisc, and says
# which of them the kernel refuses. Returns 3 (after printing) when something is missing.
probe_kernel() {
  local tag=gsp$$ ns=gs-probe-$$ miss=() err
  _probe_cleanup() {
    ip link del "${tag}a" >/dev/null 2>&1 || true
    ip link del "${tag}br" >/dev/null 2>&1 || true
    ip netns del "$ns" >/dev/null 2>&1 || true
  }
  if ! err=$(ip netns add "$ns" 2>&1); then miss+=("network namespaces ($err)"); fi
  if ! err=$(ip link add "${tag}a" type veth peer name "${tag}b" 2>&1); then
    miss+=("veth ($err)")
  elif ! err=$(tc qdisc add dev "${tag}a" root tbf rate 1gbit burst 64kb latency 20ms 2>&1); then
    miss+=("tbf qdisc ($err)")
  fi
  if ! err=$(ip link add "${tag}br" type bridge 2>&1); then miss+=("bridge ($err)"); fi
  if ! err=$(unshare --uts true 2>&1); then miss+=("UTS namespaces ($err)"); fi
  if ! err=$(unshare --mount true 2>&1); then miss+=("mount namespaces ($err)"); fi
  _probe_cleanup
  if ((${#miss[@]})); then
    local m
    echo "$PROG: cannot run here: the kernel (or this container) lacks:" >&2
    for m in "${miss[@]}"; do echo "  - $m" >&2; done
    return 3
  fi
  return 0
}

# rate_bytes_per_s RATE: tc rate syntax (bit, kbit, mbit, gbit, tbit, bps, kbps, mbps, gbps;
# k/m/g are powers of 1000 for bit, 1024 for bps as in tc(8)) -> bytes per second.
rate_bytes_per_s() {
  local r=${1,,}
  [[ $r =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit|tbit|bps|kbps|mbps|gbps)$ ]] || return 1
  awk -v v="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" 'BEGIN {
    m["bit"]=1/8; m["kbit"]=1e3/8; m["mbit"]=1e6/8; m["gbit"]=1e9/8; m["tbit"]=1e12/8;
    m["bps"]=1; m["kbps"]=1024; m["mbps"]=1048576; m["gbps"]=1073741824;
    printf "%.0f\n", v*m[u] }'
}

# default_burst RATE: 1 ms of traffic at RATE, at least 64 KiB (a GSO packet must fit).
# Measured at 1gbit (2 hosts, MPI ping-pong, one way): 1 ms (125000 B) gives 116-121 MB/s
# at 4-16 MiB (line 125 MB/s less TCP/IP headers); 4 ms lets 4 MiB messages run above the
# line rate (134 MB/s); 16-64 KiB throttle this VM's large transfers (77-97 MB/s).
# A token bucket lets a message smaller than the burst through at full speed: messages of
# less than ~burst are not slowed by the shaping (and there is no delay emulation).
default_burst() {
  local bps burst
  bps=$(rate_bytes_per_s "$1")
  burst=$((bps / 1000)); ((burst < 65536)) && burst=65536
  echo "$burst"
}

# shape DEV RATE BURST [CMD...]: tbf at RATE on DEV (through CMD, e.g. ip netns exec NS);
# queue limit = 20 ms at RATE (GS_TESTBED_LATENCY overrides, tc syntax).
shape() {
  local dev=$1 rate=$2 burst=$3 nsexec=("${@:4}")
  [[ $rate == none ]] && return 0
  "${nsexec[@]}" tc qdisc replace dev "$dev" root tbf rate "$rate" burst "$burst" \
    latency "${GS_TESTBED_LATENCY:-20ms}"
}

load_state() {
  [[ -f $STATE/config.env ]] || return 1
  # shellcheck disable=SC1091
  source "$STATE/config.env"
  return 0
}

# holder_pid I: pid of host I's namespace holder if it is alive and really ours, else "".
holder_pid() {
  local pid
  pid=$(awk -v i="$1" '$1 == i { print $5 }' "$STATE/hosts" 2>/dev/null) || true
  [[ -n $pid && -d /proc/$pid ]] || return 0
  [[ $(readlink "/proc/$pid/ns/net") == $(readlink "/proc/self/ns/net") ]] && return 0
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q '^sleep infinity' || return 0
  echo "$pid"
}

# healthy: the state exists and every host's namespace, holder and links are there.
healthy() {
  load_state || return 1
  local i k
  for ((i = 0; i < HOSTS; i++)); do
    [[ -e /run/netns/$(ns_name "$i") ]] || return 1
    [[ -n $(holder_pid "$i") ]] || return 1
    for ((k = 0; k < NICS; k++)); do ip link show "$(veth_name "$i" "$k")" >/dev/null 2>&1 || return 1; done
    if ((${DOCKER:-0})); then ip -n "$(ns_name "$i")" link show docker0 >/dev/null 2>&1 || return 1; fi
  done
  for ((k = 0; k < NICS; k++)); do ip link show "$(bridge_name "$k")" >/dev/null 2>&1 || return 1; done
  return 0
}

# teardown: removes everything of testbed NAME, from the state and by name (so that the
# leftovers of a half-built testbed go too). Safe when nothing is there.
teardown() {
  local ns pids p k n=0
  for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -E "^$NAME-h[0-9]+$" || true); do
    # Every process in one of our namespaces was started by this script (holders, orted,
    # ranks of a run): end them by pid, politely first.
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    if [[ -n $pids ]]; then
      kill -TERM $pids 2>/dev/null || true
      for _ in 1 2 3 4 5 6 7 8 9 10; do
        pids=$(ip netns pids "$ns" 2>/dev/null || true)
        [[ -z $pids ]] && break
        sleep 0.2
      done
      [[ -n $pids ]] && kill -KILL $pids 2>/dev/null || true
    fi
    ip netns del "$ns" 2>/dev/null || true
    [[ -d /etc/netns/$ns ]] && rm -rf "/etc/netns/$ns"
    n=$((n + 1))
  done
  for p in $(ip -o link show 2>/dev/null | awk -F': ' '{ print $2 }' | sed 's/@.*//' |
    grep -E "^$NAME-h[0-9]+n[01]$" || true); do
    ip link del "$p" 2>/dev/null || true
  done
  for k in 0 1; do
    ip link show "$(bridge_name "$k")" >/dev/null 2>&1 && ip link del "$(bridge_name "$k")" 2>/dev/null || true
  done
  rm -rf "$STATE" "$TMPROOT"
  echo "$n"
}

# ---- up --------------------------------------------------------------------------------
cmd_up() {
  local hosts="" rate=1gbit rph=1 nics="" subnet=${GS_TESTBED_SUBNET:-10.77.0} burst="" docker=0 mtu=1500 cc=cubic
  while (($#)); do
    case $1 in
      --hosts) hosts=${2:-}; shift 2 || usage_error "--hosts needs a value" ;;
      --rate) rate=${2:-}; shift 2 || usage_error "--rate needs a value" ;;
      --ranks-per-host) rph=${2:-}; shift 2 || usage_error "--ranks-per-host needs a value" ;;
      --nics) nics=${2:-}; shift 2 || usage_error "--nics needs a value" ;;
      --subnet) subnet=${2:-}; shift 2 || usage_error "--subnet needs a value" ;;
      --burst) burst=${2:-}; shift 2 || usage_error "--burst needs a value" ;;
      --docker) docker=1; shift ;;
      --mtu) mtu=${2:-}; shift 2 || usage_error "--mtu needs a value" ;;
      --cc) cc=${2:-}; shift 2 || usage_error "--cc needs a value" ;;
      *) usage_error "up: unknown option '$1'" ;;
    esac
  done
  [[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1 && hosts <= 64)) || usage_error "up: --hosts N (1..64) is required"
  [[ $rph =~ ^[0-9]+$ ]] && ((rph >= 1 && rph <= 256)) || usage_error "up: --ranks-per-host must be 1..256"
  [[ $mtu =~ ^[0-9]+$ ]] && ((mtu >= 576 && mtu <= 65535)) || usage_error "up: --mtu must be 576..65535 bytes, got '$mtu'"
  # --rate/--burst: one value for every NIC, or one per NIC (eth0,eth1).
  rate=${rate,,}
  local rates=() bursts=() k
  IFS=, read -r -a rates <<<"$rate"
  ((${#rates[@]} == 1 || ${#rates[@]} == 2)) && [[ $rate != *, && $rate != ,* ]] ||
    usage_error "up: --rate takes one rate or two (eth0,eth1), got '$rate'"
  [[ -n $nics ]] || nics=${#rates[@]}
  [[ $nics == 1 || $nics == 2 ]] || usage_error "up: --nics must be 1 or 2"
  ((${#rates[@]} == 1 || ${#rates[@]} == nics)) ||
    usage_error "up: --rate '$rate' gives ${#rates[@]} rates (one per NIC) but --nics is $nics"
  for k in "${!rates[@]}"; do
    [[ ${rates[k]} == none ]] || rate_bytes_per_s "${rates[k]}" >/dev/null ||
      usage_error "up: --rate '${rates[k]}' is not a tc rate (e.g. 1gbit, 100mbit, 10gbit, none)"
  done
  if ((${#rates[@]} == 1)); then
    # One rate: the setting (and config.env) of before per-NIC rates.
    if [[ $rate != none ]]; then
      [[ -n $burst ]] || burst=$(default_burst "$rate")
      [[ $burst =~ ^[0-9]+(b|kb|k|mb|m)?$ ]] || usage_error "up: --burst must be bytes (e.g. 125000, 64kb)"
    fi
    for ((k = 0; k < nics; k++)); do rates[k]=$rate; bursts[k]=$burst; done
  else
    [[ -z $burst ]] || IFS=, read -r -a bursts <<<"$burst"
    ((${#bursts[@]} <= 2)) || usage_error "up: --burst takes one value or two (eth0,eth1), got '$burst'"
    ((${#bursts[@]} == 1)) && bursts[1]=${bursts[0]}
    for k in 0 1; do
      if [[ ${rates[k]} == none ]]; then bursts[k]=none; continue; fi
      [[ -n ${bursts[k]:-} ]] || bursts[k]=$(default_burst "${rates[k]}")
      [[ ${bursts[k]} =~ ^[0-9]+(b|kb|k|mb|m)?$ ]] || usage_error "up: --burst must be bytes (e.g. 125000, 64kb)"
    done
    burst="${bursts[0]},${bursts[1]}"
  fi
  # Only the project's own private range: 10.77.0.0/16.
  [[ $subnet =~ ^10\.77\.([0-9]+)$ ]] && ((BASH_REMATCH[1] <= 254)) ||
    usage_error "up: --subnet must be 10.77.X (X 0..254; the project's own range), got '$subnet'"
  local subnet2="10.77.$((BASH_REMATCH[1] + 1))"
  [[ $cc =~ ^[a-z][a-z0-9_]{0,15}$ ]] || usage_error "up: --cc must be a congestion control's name (cubic, bbr, reno, ...) or host, got '$cc'"

  need_root
  need_tools ip tc nsenter unshare awk
  probe_kernel || exit 3
  check_cc "$cc"

  if healthy; then
    if [[ $HOSTS == "$hosts" && $RATE == "$rate" && $RANKS_PER_HOST == "$rph" && $NICS == "$nics" &&
      $SUBNET1 == "$subnet" && ${BURST:-} == "$burst" && ${DOCKER:-0} == "$docker" && ${MTU:-1500} == "$mtu" &&
      ${CC:-host} == "$cc" ]]; then
      say "testbed '$NAME' is already up with these settings ($HOSTS hosts, rate $RATE); nothing to do"
      return 0
    fi
    die "testbed '$NAME' is already up with other settings ($HOSTS hosts, rate $RATE, burst ${BURST:-none}," \
      "MTU ${MTU:-1500}, TCP congestion control ${CC:-host}, $RANKS_PER_HOST ranks/host, $NICS NIC(s), subnet $SUBNET1$( ((${DOCKER:-0})) && echo ", docker0"));" \
      "run '$PROG down' first"
  fi
  local left
  left=$(teardown)
  ((left > 0)) && say "removed the leftovers of an earlier testbed '$NAME' ($left namespace(s))"

  # Any failure from here on (set -e, die, a signal) removes what was built.
  UP_DONE=0
  trap 'if ((UP_DONE == 0)); then say "up failed; cleaning up"; teardown >/dev/null; fi' EXIT
  trap 'exit 130' INT TERM

  mkdir -p "$STATE" "$TMPROOT"
  chmod 755 "$STATE"
  local i ns br veth dev addr pid subnets=("$subnet" "$subnet2")
  for ((k = 0; k < nics; k++)); do
    br=$(bridge_name "$k")
    ip link add "$br" mtu "$mtu" type bridge stp_state 0 forward_delay 0
    # If br_netfilter is loaded, keep iptables out of the testbed's bridged traffic.
    ip link set "$br" type bridge nf_call_iptables 0 nf_call_ip6tables 0 nf_call_arptables 0 2>/dev/null || true
    ip link set "$br" up
  done

  : >"$STATE/hosts.tmp"
  {
    echo "127.0.0.1 localhost"
    for ((i = 0; i < hosts; i++)); do
      echo "${subnet}.$((i + 1)) $(ns_name "$i")"
      ((nics == 2)) && echo "${subnet2}.$((i + 1)) $(ns_name "$i")-nic1"
    done
  } >"$STATE/etc-hosts"

  for ((i = 0; i < hosts; i++)); do
    ns=$(ns_name "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    for ((k = 0; k < nics; k++)); do
      veth=$(veth_name "$i" "$k"); dev=eth$k
      addr="${subnets[k]}.$((i + 1))"
      ip link add "$veth" mtu "$mtu" type veth peer name "$dev" mtu "$mtu" netns "$ns"
      ip link set "$veth" master "$(bridge_name "$k")"
      ip link set "$veth" up
      ip -n "$ns" addr add "$addr/24" dev "$dev"
      ip -n "$ns" link set "$dev" up
      shape "$veth" "${rates[k]}" "${bursts[k]}"                      # towards the host (what it receives)
      shape "$dev" "${rates[k]}" "${bursts[k]}" ip netns exec "$ns"   # from the host (what it sends)
    done
    if [[ $cc != host ]]; then
      ip netns exec "$ns" sh -c 'echo "$1" >/proc/sys/net/ipv4/tcp_congestion_control' sh "$cc" ||
        die "host $i: cannot set its TCP congestion control to $cc"
    fi
    if ((docker)); then
      # Docker's default bridge: the same address on every host, no port, no route out.
      ip -n "$ns" link add docker0 type bridge
      ip -n "$ns" addr add 172.17.0.1/16 dev docker0
      ip -n "$ns" link set docker0 up
    fi
    mkdir -p "/etc/netns/$ns" "$TMPROOT/h$i"
    chmod 1777 "$TMPROOT/h$i"
    cp "$STATE/etc-hosts" "/etc/netns/$ns/hosts"
    # The holder: enters the netns (ip netns exec also gives a mount namespace with /etc/hosts
    # bound), then a new UTS namespace; sets the hostname, mounts a private /dev/shm and
    # sleeps. Every exec in the chain replaces the process, so $! is the sleeping holder.
    rm -f "$STATE/h$i.pid"
    setsid ip netns exec "$ns" unshare --uts sh -c \
      'hostname "$1" && mount -t tmpfs -o mode=1777 gs-shm /dev/shm && echo $$ >"$2" && exec sleep infinity' \
      sh "$ns" "$STATE/h$i.pid" </dev/null >/dev/null 2>&1 &
    local ok=0
    pid=""
    for _ in $(seq 50); do
      [[ -s $STATE/h$i.pid ]] && pid=$(<"$STATE/h$i.pid")
      if [[ -n $pid && -d /proc/$pid ]] && [[ $(nsenter -t "$pid" -u hostname 2>/dev/null) == "$ns" ]] &&
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q '^sleep infinity'; then ok=1; break; fi
      sleep 0.1
    done
    ((ok)) || die "host $i: the namespace holder did not come up (pid $pid)"
    printf '%d %s %s %s %d %s\n' "$i" "$ns" "${subnet}.$((i + 1))" \
      "$( ((nics == 2)) && echo "${subnet2}.$((i + 1))" || echo -)" "$pid" "$TMPROOT/h$i" >>"$STATE/hosts.tmp"
  done
  mv "$STATE/hosts.tmp" "$STATE/hosts"

  for ((i = 0; i < hosts; i++)); do echo "${subnet}.$((i + 1)) slots=$rph"; done >"$STATE/hostfile"
  local cc_now  # what the hosts run (with --cc host: what the machine gave them)
  cc_now=$(ip netns exec "$(ns_name 0)" cat /proc/sys/net/ipv4/tcp_congestion_control)
  write_agent
  cat >"$STATE/config.env" <<EOF
# testbed '$NAME', written by scripts/testbed.sh up on $(date -u +%Y-%m-%dT%H:%M:%SZ)
HOSTS=$hosts
RATE=$rate
BURST=$burst
RANKS_PER_HOST=$rph
NICS=$nics
SUBNET1=$subnet
SUBNET2=$( ((nics == 2)) && echo "$subnet2" || echo "")
DOCKER=$docker
MTU=$mtu
CC=$cc
CC_EFFECTIVE=$cc_now
EOF
  # shellcheck disable=SC2034  # read by the EXIT trap
  UP_DONE=1
  trap - EXIT INT TERM
  say "testbed '$NAME' is up: $hosts host(s) $(ns_name 0)..$(ns_name $((hosts - 1))), rate $rate per link" \
    "direction, MTU $mtu, TCP $cc_now, $rph rank(s)/host, $nics NIC(s) (eth0 ${subnet}.0/24$( ((nics == 2)) && echo ", eth1 ${subnet2}.0/24"))$( ((docker)) && echo ", docker0 172.17.0.1/16 on every host")"
  say "state in $STATE; next: $PROG$([[ $NAME == gs ]] || echo " --name $NAME") run -- CMD"
}

# check_cc NAME: NAME (unless "host") is a TCP congestion control this kernel has (loading
# its module if need be) and one a namespace may pick; adds it to the machine's allowed
# list when it is not there (a namespace may default only to an allowed one). Exit 3 when
# the kernel lacks it.
check_cc() {
  local cc=$1 f=/proc/sys/net/ipv4 allowed
  [[ $cc == host ]] && return 0
  if ! grep -qw -- "$cc" "$f/tcp_available_congestion_control"; then
    modprobe "tcp_$cc" >/dev/null 2>&1 || true
    grep -qw -- "$cc" "$f/tcp_available_congestion_control" ||
      missing "up: --cc $cc: this kernel has no such TCP congestion control (it has: $(<"$f/tcp_available_congestion_control"))"
  fi
  allowed=$(<"$f/tcp_allowed_congestion_control")
  grep -qw -- "$cc" <<<"$allowed" && return 0
  echo "$allowed $cc" >"$f/tcp_allowed_congestion_control" ||
    die "up: --cc $cc: cannot add it to net.ipv4.tcp_allowed_congestion_control (a namespace may only pick an allowed one)"
  say "added $cc to net.ipv4.tcp_allowed_congestion_control (machine-wide, until reboot; was: $allowed):" \
    "a namespace may only default to an allowed one"
}

# The rsh agent Open MPI calls as `agent [opts] HOST COMMAND...` (HOST is an address from
# the hostfile or a host name); it runs COMMAND through sh in HOST's namespaces, as sshd
# would, with that host's TMPDIR.
write_agent() {
  cat >"$STATE/agent" <<EOF
#!/usr/bin/env bash
# plm_rsh_agent of testbed '$NAME' (generated by scripts/testbed.sh; do not edit).
set -euo pipefail
hosts_file=$STATE/hosts
while [[ \${1:-} == -* ]]; do shift; done   # ssh-style options, if any, are ignored
target=\${1:?usage: agent HOST COMMAND...}; shift
line=\$(awk -v h="\$target" '\$2 == h || \$3 == h || \$4 == h || \$2"-nic1" == h' "\$hosts_file")
[[ -n \$line ]] || { echo "testbed agent: unknown host '\$target'" >&2; exit 255; }
read -r idx name _ _ pid tmp <<<"\$line"
exec nsenter -t "\$pid" -n -u -m --wd=/ env TMPDIR="\$tmp" GS_TESTBED_NAME=$NAME \\
  GS_TESTBED_HOST="\$idx" sh -c "\$*"
EOF
  chmod 755 "$STATE/agent"
}

# ---- run -------------------------------------------------------------------------------
cmd_run() {
  local np="" net=1 tcp_only=0 timeout_s="" xs=() keys=() vals=() user_cmd=() k
  set_mca() {  # set_mca KEY VALUE: later values replace earlier ones
    local j
    for ((j = 0; j < ${#keys[@]}; j++)); do
      if [[ ${keys[j]} == "$1" ]]; then vals[j]=$2; return; fi
    done
    keys+=("$1"); vals+=("$2")
  }
  local user_keys=() user_vals=()
  while (($#)); do
    case $1 in
      --mca | -mca) (($# >= 3)) || usage_error "run: --mca needs KEY VALUE"
        user_keys+=("$2"); user_vals+=("$3"); shift 3 ;;
      -x) (($# >= 2)) || usage_error "run: -x needs VAR or VAR=VALUE"; xs+=(-x "$2"); shift 2 ;;
      --np | -np | -n) np=${2:-}; shift 2 || usage_error "run: --np needs a value" ;;
      --net) net=${2:-}; shift 2 || usage_error "run: --net needs a value" ;;
      --tcp-only) tcp_only=1; shift ;;
      --timeout) timeout_s=${2:-}; shift 2 || usage_error "run: --timeout needs seconds" ;;
      --name) NAME=${2:-}; shift 2 || usage_error "--name needs a value"; set_names ;;
      --) shift; user_cmd=("$@"); break ;;
      *) usage_error "run: unknown option '$1' (the command goes after --)" ;;
    esac
  done
  ((${#user_cmd[@]})) || usage_error "run: no command given (run [options] -- CMD ARGS...)"
  need_root
  need_tools nsenter mpirun
  healthy || die "testbed '$NAME' is not up (or is broken: see '$PROG status'); run '$PROG up --hosts N' first"
  [[ -z $np ]] && np=$((HOSTS * RANKS_PER_HOST))
  [[ $np =~ ^[0-9]+$ ]] && ((np >= 1)) || usage_error "run: --np must be a positive integer"
  [[ -z $timeout_s || $timeout_s =~ ^[0-9]+$ ]] || usage_error "run: --timeout must be whole seconds"
  local btl_net
  case $net in
    1) btl_net="$SUBNET1.0/24" ;;
    2) [[ -n $SUBNET2 ]] || die "run: --net 2 needs a testbed with --nics 2"; btl_net="$SUBNET2.0/24" ;;
    both) [[ -n $SUBNET2 ]] || die "run: --net both needs a testbed with --nics 2"
      btl_net="$SUBNET1.0/24,$SUBNET2.0/24" ;;
    default) btl_net="" ;;   # Open MPI's own choice: every interface but loopback
    *) usage_error "run: --net must be 1, 2, both or default" ;;
  esac
  set_mca plm rsh
  set_mca plm_rsh_agent "$STATE/agent"
  set_mca plm_rsh_no_tree_spawn 1
  set_mca oob_tcp_if_include "$SUBNET1.0/24"
  [[ -n $btl_net ]] && set_mca btl_tcp_if_include "$btl_net"
  set_mca pml ob1
  if ((tcp_only)); then set_mca btl self,tcp; else set_mca btl self,vader,tcp; fi
  # The hosts share this machine's cores. Open MPI's ranks poll while they wait, and each
  # host's orted counts only its own ranks, so none of them yields: with more ranks than
  # cores a waiting rank takes the core that another host's rank (or the kernel's TCP work)
  # needs, which separate machines would not. So ranks yield when idle then.
  local cores; cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
  ((np > cores)) && set_mca mpi_yield_when_idle 1
  for ((k = 0; k < ${#user_keys[@]}; k++)); do set_mca "${user_keys[k]}" "${user_vals[k]}"; done

  local args=(mpirun --hostfile "$STATE/hostfile" --np "$np" --bind-to none --oversubscribe)
  for ((k = 0; k < ${#keys[@]}; k++)); do args+=(--mca "${keys[k]}" "${vals[k]}"); done
  args+=("${xs[@]}" "${user_cmd[@]}")
  local pid0 tmp0
  read -r _ _ _ _ pid0 tmp0 < <(awk '$1 == 0' "$STATE/hosts")
  echo "# testbed '$NAME' ($HOSTS hosts, rate $RATE): ${args[*]}" >&2
  local pre=()
  [[ -n $timeout_s ]] && pre=(timeout -k 5 "$timeout_s")
  local rc=0
  "${pre[@]}" nsenter -t "$pid0" -n -u -m --wd="$PWD" \
    env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 TMPDIR="$tmp0" \
    GS_TESTBED_NAME="$NAME" GS_TESTBED_HOST=0 "${args[@]}" || rc=$?
  if ((rc == 124)) && [[ -n $timeout_s ]]; then
    say "run: timed out after ${timeout_s}s; ending what is left of the job on the hosts"
    kill_stragglers
  fi
  return "$rc"
}

# kill_stragglers: ends processes left in the hosts' namespaces other than the holders
# (orted or ranks of a run that was killed).
kill_stragglers() {
  local i ns keep p
  for ((i = 0; i < HOSTS; i++)); do
    ns=$(ns_name "$i"); keep=$(holder_pid "$i")
    for p in $(ip netns pids "$ns" 2>/dev/null || true); do
      [[ $p == "$keep" ]] || kill -KILL "$p" 2>/dev/null || true
    done
  done
}

# ---- status / down / probe -------------------------------------------------------------
cmd_status() {
  (($# == 0)) || usage_error "status takes no arguments (besides --name)"
  if ! load_state; then
    local left
    left=$(ip netns list 2>/dev/null | awk '{ print $1 }' | grep -cE "^$NAME-h[0-9]+$" || true)
    if ((left > 0)); then
      echo "testbed '$NAME': nothing is up, but $left leftover namespace(s) exist; run '$PROG down'"
      return 1
    fi
    echo "testbed '$NAME': nothing is up"
    return 0
  fi
  local state=up
  healthy || state="BROKEN (run '$PROG down', then up again)"
  echo "testbed '$NAME': $state"
  local shaping="rate $RATE per link direction (tbf burst $BURST B)"
  [[ $RATE == none ]] && shaping="unshaped links"
  [[ $RATE == *,* ]] && shaping="rates eth0 ${RATE%%,*}, eth1 ${RATE#*,} per link direction (tbf bursts ${BURST%%,*}, ${BURST#*,} B)"
  echo "  hosts $HOSTS, $shaping, MTU ${MTU:-1500}, TCP ${CC_EFFECTIVE:-?}$([[ ${CC:-host} == host ]] && echo " (the machine's)"), ranks/host $RANKS_PER_HOST, NICs $NICS" \
    "(eth0 $SUBNET1.0/24${SUBNET2:+, eth1 $SUBNET2.0/24})$( ((${DOCKER:-0})) && echo ", docker0 172.17.0.1/16 on every host (no port)")"
  echo "  state $STATE (hostfile, agent, hosts), TMPDIRs under $TMPROOT"
  printf '  %-10s %-12s %-12s %-8s %s\n' host eth0 eth1 holder "bytes sent by the host (eth0 eth1, from tc)"
  local i name a1 a2 pid sent k s
  while read -r i name a1 a2 pid _; do
    [[ -n $(holder_pid "$i") ]] || pid="DEAD"
    sent=""
    for ((k = 0; k < NICS; k++)); do
      s=$(ip netns exec "$name" tc -s qdisc show dev "eth$k" 2>/dev/null | awk '/Sent/ { print $2; exit }' || true)
      sent+="${s:-?} "
    done
    printf '  %-10s %-12s %-12s %-8s %s\n' "$name" "$a1" "$a2" "$pid" "$sent"
  done <"$STATE/hosts"
  [[ $state == up ]]
}

cmd_down() {
  (($# == 0)) || usage_error "down takes no arguments (besides --name)"
  need_root
  need_tools ip
  local n
  n=$(teardown)
  if ((n == 0)); then say "testbed '$NAME': nothing was up"; else say "testbed '$NAME' is down ($n host(s) removed)"; fi
}

cmd_probe() {
  need_root
  need_tools ip tc nsenter unshare
  probe_kernel || exit 3
  echo "testbed: this machine has what the testbed needs (root, netns, veth, bridge, tbf, UTS/mount namespaces)"
}

# ---- main ------------------------------------------------------------------------------
main() {
  local cmd="" rest=()
  while (($#)); do
    case $1 in
      --name) NAME=${2:-}; shift 2 || usage_error "--name needs a value" ;;
      -h | --help | help) usage; exit 0 ;;
      *) if [[ -z $cmd ]]; then cmd=$1; shift
         elif [[ $cmd == run ]]; then rest+=("$@"); break   # run's command may contain --name
         else rest+=("$1"); shift; fi ;;
    esac
  done
  [[ -n $cmd ]] || { usage >&2; exit 2; }
  set_names
  case $cmd in
    up) cmd_up "${rest[@]}" ;;
    run) cmd_run "${rest[@]}" ;;
    status) cmd_status "${rest[@]}" ;;
    down) cmd_down "${rest[@]}" ;;
    probe) cmd_probe "${rest[@]}" ;;
    *) usage_error "unknown command '$cmd' (up, run, status, down, probe, help)" ;;
  esac
}

main "$@"
