#!/usr/bin/env bash
# scripts/slurm/local-cluster.sh — a real single-node Slurm on this machine, for trying the
# batch templates and for tests.
#
#   scripts/slurm/local-cluster.sh start|stop|status [--dir DIR] [--ctld-port P] [--slurmd-port P]
#
# start   runs a private munged (own key, socket, pid and log under DIR/munge; the system's
#         munged, if any, is not touched), then slurmctld and slurmd with `-f DIR/slurm.conf`
#         on ports of their own (default 16817/16818), all state, spool, logs and pid files
#         under DIR (default /tmp/gradsync-slurm). It waits (at most GS_SLURM_WAIT_S, default
#         60 s) until sinfo shows the node idle, and prints the line to point clients at it:
#             export SLURM_CONF=DIR/slurm.conf
#         Starting a cluster that already runs prints that line again and does nothing else.
# status  sinfo and squeue of the cluster (exit 1 when it is not running).
# stop    cancels its jobs, ends its daemons (by their pid files) and removes DIR. Fine when
#         nothing runs.
#
# The node is this machine: NodeName=$(hostname -s) NodeAddr=127.0.0.1 CPUs=$(nproc) (OMP_NUM_THREADS ignored), one
# partition "gs" (default) with OverSubscribe=FORCE:4, so up to 4 jobs share a core
# (tests on a 2-core machine can run 2-rank jobs side by side). The configuration:
# SlurmUser=root, AuthType=auth/munge, ProctrackType=proctrack/linuxproc,
# TaskPlugin=task/none, SelectType=select/cons_tres, SelectTypeParameters=CR_Core,
# MpiDefault=none (use `srun --mpi=pmix`; pmi2 does not work with Debian's Open MPI).
# Everything listens on / talks to 127.0.0.1 only.
#
# Options (or environment): --dir (GS_SLURM_DIR), --ctld-port (GS_SLURM_CTLD_PORT),
# --slurmd-port (GS_SLURM_SLURMD_PORT), GS_SLURM_CLUSTER (cluster name, default gradsync).
# Two clusters with different dirs and ports run side by side (the tests use their own).
#
# Needs root and the Debian packages slurm-wlm (slurmctld, slurmd, client commands) and
# munge (munged). Exit status: 0 ok; 1 failure; 2 bad usage; 3 not root or a program missing.

set -euo pipefail

PROG=local-cluster.sh
DIR=${GS_SLURM_DIR:-/tmp/gradsync-slurm}
CTLD_PORT=${GS_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${GS_SLURM_SLURMD_PORT:-16818}
CLUSTER=${GS_SLURM_CLUSTER:-gradsync}
WAIT_S=${GS_SLURM_WAIT_S:-60}
MARKER=.gradsync-local-slurm

die() { echo "$PROG: error: $*" >&2; exit 1; }
usage_error() { echo "$PROG: $*" >&2; echo "usage: $PROG start|stop|status [--dir DIR] [--ctld-port P] [--slurmd-port P]" >&2; exit 2; }
missing() { echo "$PROG: cannot run here: $*" >&2; exit 3; }
say() { echo "$PROG: $*" >&2; }

need_root() { [[ $(id -u) -eq 0 ]] || missing "must run as root (SlurmUser=root, slurmd)"; }
need_tools() {
  local t miss=()
  for t in munged munge slurmctld slurmd sinfo squeue scontrol scancel; do
    command -v "$t" >/dev/null 2>&1 || [[ -x /usr/sbin/$t ]] || miss+=("$t")
  done
  ((${#miss[@]} == 0)) ||
    missing "program(s) not found: ${miss[*]} (install the Debian packages slurm-wlm and munge)"
}
sbin() { command -v "$1" 2>/dev/null || echo "/usr/sbin/$1"; }

conf() { echo "$DIR/slurm.conf"; }
# The node's CPUs. GNU nproc honours OMP_NUM_THREADS / OMP_THREAD_LIMIT: with
# OMP_NUM_THREADS=1 in the environment (common in batch scripts, and ctest's torch tests)
# the node would get 1 CPU and a 2-task step would ask for 2 nodes and never start.
node_cpus() { env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc; }
clients() { SLURM_CONF=$(conf) "$@"; }

# pid_alive NAME: the pid in DIR/run/NAME.pid if that process is alive and is NAME.
pid_alive() {
  local f=$DIR/run/$1.pid pid
  [[ -s $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ && -d /proc/$pid ]] || return 1
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$1"* ]] || return 1
  echo "$pid"
}

running() {
  [[ -f $DIR/$MARKER ]] && pid_alive munged >/dev/null && pid_alive slurmctld >/dev/null &&
    pid_alive slurmd >/dev/null
}

conf_ports() {
  awk -F= '$1 == "SlurmctldPort" { c = $2 } $1 == "SlurmdPort" { d = $2 } END { print c "/" d }' "$(conf)"
}

node_state() { clients sinfo -h -N -o '%t' 2>/dev/null | head -1; }

log_tails() {
  local f
  for f in "$DIR"/log/*.log; do
    [[ -f $f ]] || continue
    echo "---- last lines of $f" >&2
    tail -n 15 "$f" >&2
  done
}

port_in_use() {
  command -v ss >/dev/null 2>&1 || return 1
  ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

write_conf() {
  local node cpus
  node=$(hostname -s)
  cpus=$(node_cpus)
  cat >"$(conf)" <<EOF
# Written by scripts/slurm/local-cluster.sh start ($(date -u +%Y-%m-%dT%H:%M:%SZ)); removed by stop.
ClusterName=$CLUSTER
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$DIR/munge/munge.socket
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
MailProg=/bin/true
PlugStackConfig=$DIR/plugstack.conf
SlurmdTimeout=60
InactiveLimit=0
KillWait=5
MinJobAge=300
NodeName=$node NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=gs Nodes=$node Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
  : >"$DIR/plugstack.conf"
}

stop_daemons() {
  local name pid n
  if pid_alive slurmctld >/dev/null; then
    # Cancel this cluster's jobs first so that no slurmstepd outlives its slurmd.
    n=$(clients squeue -h -o %i 2>/dev/null | wc -l || true)
    if ((n > 0)); then
      say "cancelling $n job(s)"
      clients scancel --full --quiet --user=root 2>/dev/null || true
      for _ in $(seq 20); do
        [[ -z $(clients squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.5
      done
    fi
  fi
  for name in slurmd slurmctld munged; do
    pid=$(pid_alive "$name") || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do [[ -d /proc/$pid ]] || break; sleep 0.2; done
    [[ -d /proc/$pid ]] && kill -KILL "$pid" 2>/dev/null || true
  done
}

cmd_start() {
  need_root
  need_tools
  if running; then
    say "already running (dir $DIR, ports $(conf_ports)), node $(node_state)"
    echo "export SLURM_CONF=$(conf)"
    return 0
  fi
  if [[ -e $DIR && ! -f $DIR/$MARKER ]] && [[ -n $(ls -A "$DIR" 2>/dev/null) ]]; then
    die "$DIR exists and is not a local cluster's folder; give another --dir"
  fi
  [[ -f $DIR/$MARKER ]] && { say "removing the leftovers of an earlier start in $DIR"; stop_daemons; rm -rf "$DIR"; }
  local p
  for p in "$CTLD_PORT" "$SLURMD_PORT"; do
    port_in_use "$p" && die "port $p is in use (another Slurm?); choose others with --ctld-port/--slurmd-port"
  done

  START_DONE=0
  trap 'if ((START_DONE == 0)); then say "start failed; stopping what was started"; log_tails; stop_daemons; rm -rf "$DIR"; fi' EXIT
  trap 'exit 130' INT TERM

  mkdir -p "$DIR"/{munge,state,spool,log,run}
  touch "$DIR/$MARKER"
  chmod 755 "$DIR" "$DIR/munge"   # munged wants its socket's folders searchable by all
  chmod 700 "$DIR/state"
  # A private munge key (the cluster talks only to itself).
  head -c 1024 /dev/urandom >"$DIR/munge/munge.key"
  chmod 600 "$DIR/munge/munge.key"
  "$(sbin munged)" --socket="$DIR/munge/munge.socket" --pid-file="$DIR/run/munged.pid" \
    --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge/munged.seed" \
    --key-file="$DIR/munge/munge.key" ||
    die "munged did not start"
  munge -S "$DIR/munge/munge.socket" -n >/dev/null || die "munged does not answer on $DIR/munge/munge.socket"

  write_conf
  "$(sbin slurmctld)" -f "$(conf)" || die "slurmctld did not start"
  "$(sbin slurmd)" -f "$(conf)" || die "slurmd did not start"

  # The daemons fork and write their pid files a moment later: a daemon counts as gone
  # only when its pid file is still missing after 10 s, or names a dead process.
  local st="" t0=$SECONDS d
  while ((SECONDS - t0 < WAIT_S)); do
    st=$(node_state)
    [[ $st == idle ]] && break
    for d in slurmctld slurmd; do
      if [[ -s $DIR/run/$d.pid ]] || ((SECONDS - t0 >= 10)); then
        pid_alive "$d" >/dev/null || die "$d exited (or never wrote $DIR/run/$d.pid)"
      fi
    done
    sleep 0.5
  done
  [[ $st == idle ]] || die "the node is not idle after ${WAIT_S}s (state '${st:-unknown}')"
  # shellcheck disable=SC2034  # read by the EXIT trap
  START_DONE=1
  trap - EXIT INT TERM
  say "Slurm cluster '$CLUSTER' is up in $((SECONDS - t0))s: node $(hostname -s) ($(node_cpus) CPUs), partition gs," \
    "ports $CTLD_PORT/$SLURMD_PORT, dir $DIR"
  echo "export SLURM_CONF=$(conf)"
}

cmd_status() {
  if ! running; then
    if [[ -f $DIR/$MARKER ]]; then
      echo "local Slurm ($DIR): not running (a daemon died; '$PROG stop' cleans up, 'start' restarts)"
    else
      echo "local Slurm ($DIR): not running"
    fi
    return 1
  fi
  echo "local Slurm ($DIR): running, ports $(conf_ports); export SLURM_CONF=$(conf)"
  clients sinfo
  clients squeue
}

cmd_stop() {
  need_root
  if [[ ! -f $DIR/$MARKER ]]; then
    [[ -e $DIR ]] && die "$DIR is not a local cluster's folder; not touching it"
    say "nothing to stop ($DIR does not exist)"
    return 0
  fi
  stop_daemons
  rm -rf "$DIR"
  say "stopped; removed $DIR"
}

main() {
  local cmd=""
  while (($#)); do
    case $1 in
      --dir) DIR=${2:-}; shift 2 || usage_error "--dir needs a value" ;;
      --ctld-port) CTLD_PORT=${2:-}; shift 2 || usage_error "--ctld-port needs a value" ;;
      --slurmd-port) SLURMD_PORT=${2:-}; shift 2 || usage_error "--slurmd-port needs a value" ;;
      -h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed -e '/^set -euo/d' -e 's/^# \{0,1\}//'; exit 0 ;;
      start | stop | status) [[ -z $cmd ]] || usage_error "one command at a time"; cmd=$1; shift ;;
      *) usage_error "unknown argument '$1'" ;;
    esac
  done
  [[ -n $cmd ]] || usage_error "no command"
  [[ $DIR == /* ]] || usage_error "--dir must be an absolute path"
  [[ $DIR != / && $DIR != /tmp && $DIR != /tmp/ ]] || usage_error "--dir must be a folder of its own"
  DIR=${DIR%/}
  [[ $CTLD_PORT =~ ^[0-9]+$ && $SLURMD_PORT =~ ^[0-9]+$ && $CTLD_PORT != "$SLURMD_PORT" ]] ||
    usage_error "ports must be two different numbers"
  "cmd_$cmd"
}

main "$@"
