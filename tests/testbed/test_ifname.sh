#!/usr/bin/env bash
# tests/testbed/test_ifname.sh TESTBED_SH BENCH PYTHON
#
# Two NICs of different rates and a docker-like bridge (testbed.sh up --rate 1gbit,200mbit
# --docker): the shaping and docker0 are there on both hosts, bad --rate lists exit 2, and
# gradsync-bench's /net records where the bytes went: pinned to eth1 (--net 2) over eth1,
# pinned to eth0 (--net 1) over eth0, left to Open MPI (--net default, docker0 excluded so
# that the run can finish) over the NICs and never docker0; with docker0 left in, the job
# ends through GRADSYNC_TIMEOUT_S naming the set-up. Then down removes everything.
# Checks where the traffic went, never how fast.
# Exit: 0 pass, 1 fail, 77 skip (not root, no h5py, or the kernel lacks what the testbed needs).
# docker0 itself sends a few hundred bytes (IPv6 neighbour discovery): under 64 KiB is "none".
# Bounded: every run has a timeout; the testbed goes down on every exit (trap).
set -uo pipefail

TB=${1:?usage: test_ifname.sh TESTBED_SH BENCH PYTHON}
BENCH=${2:?usage: test_ifname.sh TESTBED_SH BENCH PYTHON}
PY=${3:?usage: test_ifname.sh TESTBED_SH BENCH PYTHON}
NAME=gsifn             # its own testbed name and subnets (10.77.210, 10.77.211)
SUBNET=10.77.210

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
command -v mpirun >/dev/null || skip "mpirun not found"
[[ -x $BENCH ]] || fail "benchmark program not found: $BENCH"
"$PY" -c 'import h5py' 2>/dev/null || skip "$PY has no h5py"
out=$(bash "$TB" probe 2>&1); rc=$?
if ((rc == 3)); then skip "$out"; elif ((rc != 0)); then fail "testbed.sh probe: $out"; fi

tb() { bash "$TB" --name "$NAME" "$@"; }
WORK=$(mktemp -d /tmp/gs-ifname-test.XXXXXX)
chmod 755 "$WORK"
trap 'tb down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
tb down >/dev/null 2>&1   # leftovers of an earlier, killed run of this test

# Bad input: one clear line naming the option, exit 2, nothing built.
for bad in "--rate 1gbit,200mbit --nics 1" "--rate 1gbit,fast" "--rate 1gbit,200mbit,10mbit" "--rate 1gbit, --nics 2"; do
  # shellcheck disable=SC2086
  msg=$(tb up --hosts 2 --subnet "$SUBNET" $bad 2>&1); rc=$?
  ((rc == 2)) || fail "up $bad: exit $rc, expected 2 ($msg)"
  [[ $msg == *"--rate"* ]] || fail "up $bad: the message does not name --rate: $msg"
done
ip netns list | grep -q "^$NAME-h" && fail "a refused up left namespaces"

tb up --hosts 2 --rate 1gbit,200mbit --docker --subnet "$SUBNET" || fail "testbed up"
tb up --hosts 2 --rate 1gbit,200mbit --docker --subnet "$SUBNET" 2>&1 | grep -q "nothing to do" ||
  fail "a second identical up should be a no-op"
st=$(tb status) || fail "status after up: $st"
echo "$st"
[[ $st == *"rates eth0 1gbit, eth1 200mbit"* && $st == *docker0* ]] || fail "status does not show the rates and docker0"
for i in 0 1; do
  ns=$NAME-h$i
  ip -n "$ns" -o -4 addr show dev docker0 | grep -q " 172.17.0.1/16 " || fail "$ns: no docker0 with 172.17.0.1/16"
  [[ $(ip -n "$ns" -o link show master docker0 | wc -l) -eq 0 ]] || fail "$ns: docker0 has ports"
  tc -n "$ns" qdisc show dev eth0 | grep -q "rate 1Gbit" || fail "$ns: eth0 is not shaped at 1gbit"
  tc -n "$ns" qdisc show dev eth1 | grep -q "rate 200Mbit" || fail "$ns: eth1 is not shaped at 200mbit"
done

# bench NET EXTRA...: a small ring all-reduce; prints the mpirun line testbed.sh used.
bench() {
  local net=$1; shift
  (cd "$WORK" && tb run --net "$net" "$@" --timeout 60 -- "$BENCH" --op allreduce --algo ring -b 1M -e 1M \
    -n 3 -w 1 --out "$WORK/net-$net.h5") >"$WORK/net-$net.out" 2>&1 || {
    cat "$WORK/net-$net.out"; fail "run --net $net failed"; }
  grep "^# testbed" "$WORK/net-$net.out"
  grep "Interface bytes" "$WORK/net-$net.out"
}
# split FILE: "iface:tx_bytes_summed_over_ranks ..." from /net (also checks its shape).
split() {
  "$PY" - "$1" <<'PY'
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    g = f["net"]
    names = list(g["interface"].asstr()[:])
    tx, rx = g["tx_bytes"][:], g["rx_bytes"][:]
    assert tx.shape == rx.shape == (int(f.attrs["nranks"]), len(names)), (tx.shape, names)
    print(" ".join(f"{n}:{int(tx[:, k].clip(0).sum())}" for k, n in enumerate(names)))
PY
}
bytes_of() { tr ' ' '\n' <<<"$1" | awk -F: -v n="$2" '$1 == n { print $2 }'; }
# 2 ranks, ring all-reduce of 1 MiB: each rank sends 1 MiB per call, (1 + 3) calls x 2 modes.
LEAST=$((2 * 8 * 1048576))

bench 2 || exit 1
s=$(split "$WORK/net-2.h5") || fail "cannot read /net of the --net 2 run"
echo "--net 2 (pinned eth1): $s"
[[ -n $s ]] || fail "empty /net"
e0=$(bytes_of "$s" eth0); e1=$(bytes_of "$s" eth1); d0=$(bytes_of "$s" docker0)
[[ -n $e0 && -n $e1 && -n $d0 ]] || fail "/net should list eth0, eth1 and docker0: $s"
((e1 >= LEAST)) || fail "pinned to eth1, but eth1 sent only $e1 bytes (< $LEAST)"
((e0 < e1 / 10)) || fail "pinned to eth1, but eth0 sent $e0 bytes (eth1 $e1)"
((d0 < 65536)) || fail "docker0 sent $d0 bytes (more than its own IPv6 neighbour discovery)"

bench 1 || exit 1
s=$(split "$WORK/net-1.h5") || fail "cannot read /net of the --net 1 run"
echo "--net 1 (pinned eth0): $s"
e0=$(bytes_of "$s" eth0); e1=$(bytes_of "$s" eth1)
((e0 >= LEAST && e1 < e0 / 10)) || fail "pinned to eth0, but eth0 sent $e0 bytes and eth1 $e1"

line=$(bench default --mca btl_tcp_if_exclude 127.0.0.1/8,docker0) || exit 1
echo "$line"
[[ $line != *btl_tcp_if_include* ]] || fail "--net default still passed btl_tcp_if_include"
[[ $line == *"oob_tcp_if_include $SUBNET.0/24"* ]] || fail "--net default should keep oob on eth0's subnet"
s=$(split "$WORK/net-default.h5") || fail "cannot read /net of the --net default run"
echo "--net default, docker0 excluded (Open MPI's choice): $s"
e0=$(bytes_of "$s" eth0); e1=$(bytes_of "$s" eth1); d0=$(bytes_of "$s" docker0)
((e0 + e1 >= LEAST)) || fail "left to Open MPI, the NICs sent only $((e0 + e1)) bytes"
((d0 < 65536)) || fail "docker0 was excluded but sent $d0 bytes"

# Left to Open MPI with docker0 present, the ranks' first messages go nowhere (each host's
# docker0 has the same address): the watchdog must end the job with the set-up named, well
# before testbed.sh's own --timeout.
t0=$SECONDS
(cd "$WORK" && tb run --net default -x GRADSYNC_TIMEOUT_S=5 --timeout 60 -- "$BENCH" --op allreduce --algo ring \
  -b 1M -e 1M -n 3 -w 1 --out "$WORK/docker0.h5") >"$WORK/docker0.out" 2>&1 && {
  cat "$WORK/docker0.out"; fail "--net default with docker0 present succeeded (expected the set-up to time out)"; }
took=$((SECONDS - t0))
grep -q "timed out after 5 s (GRADSYNC_TIMEOUT_S) in the communicator's set-up" "$WORK/docker0.out" || {
  cat "$WORK/docker0.out"; fail "--net default with docker0: no time-out naming the set-up"; }
((took < 45)) || fail "--net default with docker0 ended after $took s, not by GRADSYNC_TIMEOUT_S=5"
[[ ! -e $WORK/docker0.h5 ]] || fail "a result file after the set-up timed out"
echo "--net default with docker0 present: set-up timed out as named, after $took s"
tb down || fail "down"
st=$(tb status) || fail "status after down exits non-zero: $st"
[[ $st == *"nothing is up"* ]] || fail "status after down should say nothing is up, got: $st"
ip netns list | grep -q "^$NAME-h" && fail "namespaces left after down"
ip -o link show | grep -q "$NAME-" && fail "links left after down"
echo "PASS"
