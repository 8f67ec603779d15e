#!/usr/bin/env bash
# tests/testbed/test_two_hosts.sh TESTBED_SH BENCH
#
# Brings up a 2-host testbed shaped at 1gbit, checks that each rank runs on its own host
# (hostname, TMPDIR), that ranks yield when idle once they outnumber the cores the hosts
# share, that an MPI ping-pong of 4 MiB between the hosts stays under the
# shaped line rate (125 MB/s) and above a floor (traffic really crosses the link, which
# counts it) and that the hosts run cubic, which the result names; then takes it down and
# checks that status says nothing is up; then --cc and --mtu.
# Exit: 0 pass, 1 fail, 77 skip (not root, or the kernel lacks namespaces/veth/bridge/tbf).
# Bounded: every mpirun has a timeout; the testbed goes down on every exit (trap).
set -uo pipefail

TB=${1:?usage: test_two_hosts.sh TESTBED_SH BENCH}
BENCH=${2:?usage: test_two_hosts.sh TESTBED_SH BENCH}
NAME=gstest            # not the default "gs": a testbed a user brought up is left alone
SUBNET=10.77.200
FLOOR_MBS=${GS_TEST_FLOOR_MBS:-30}
CEIL_MBS=125           # 1gbit = 125e6 bytes/s on the wire, headers included

fail() { echo "FAIL: $*" >&2; exit 1; }
skip() { echo "SKIP: $*" >&2; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "needs root (network namespaces)"
command -v mpirun >/dev/null || skip "mpirun not found"
[[ -x $BENCH ]] || fail "benchmark program not found: $BENCH"
out=$(bash "$TB" probe 2>&1); rc=$?
if ((rc == 3)); then skip "$out"; elif ((rc != 0)); then fail "testbed.sh probe: $out"; fi

tb() { bash "$TB" --name "$NAME" "$@"; }
WORK=$(mktemp -d /tmp/gs-testbed-test.XXXXXX)
chmod 755 "$WORK"
trap 'tb down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
tb down >/dev/null 2>&1   # leftovers of an earlier, killed run of this test

tb up --hosts 2 --rate 1gbit --subnet "$SUBNET" || fail "testbed up"
tb up --hosts 2 --rate 1gbit --subnet "$SUBNET" || fail "a second identical up should be a no-op"
tb status || fail "status after up"

# One rank per host, each with its own hostname and TMPDIR.
hosts=$(tb run --timeout 60 -- sh -c 'echo "$(hostname) $TMPDIR"') || fail "run hostname"
echo "$hosts"
[[ $(echo "$hosts" | awk '{ print $1 }' | sort -u | tr '\n' ' ') == "$NAME-h0 $NAME-h1 " ]] ||
  fail "expected hostnames $NAME-h0 and $NAME-h1, got: $hosts"
[[ $(echo "$hosts" | awk '{ print $2 }' | sort -u | wc -l) -eq 2 ]] || fail "TMPDIRs are not per host"

# The hosts share this machine's cores: once the ranks outnumber them, ranks yield when idle
# (mpirun's --mca reaches each rank as OMPI_MCA_*); a --mca of the user's still wins.
yield_of() { tb run --timeout 60 "$@" -- sh -c 'echo "${OMPI_MCA_mpi_yield_when_idle:-unset}"' | sort -u | tr '\n' ' '; }
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
y=$(yield_of --np $((cores + 1))) || fail "run --np $((cores + 1))"
[[ $y == "1 " ]] || fail "$((cores + 1)) ranks on $cores cores: mpi_yield_when_idle is '$y', expected 1"
if ((cores >= 2)); then
  y=$(yield_of --np 2) || fail "run --np 2"
  [[ $y == "unset " ]] || fail "2 ranks on $cores cores: mpi_yield_when_idle is '$y', expected none"
fi
y=$(yield_of --np $((cores + 1)) --mca mpi_yield_when_idle 0) || fail "run with --mca mpi_yield_when_idle 0"
[[ $y == "0 " ]] || fail "the user's --mca mpi_yield_when_idle 0 gave '$y'"

sent_before=$(ip netns exec "$NAME-h1" tc -s qdisc show dev eth0 | awk '/Sent/ { print $2; exit }')
res=$(cd "$WORK" && tb run --timeout 90 -- "$BENCH" --op pingpong -b 4M -e 4M -n 10 -w 2 --out "$WORK/pp.h5") ||
  fail "ping-pong run failed"
echo "$res"
[[ -s $WORK/pp.h5 ]] || fail "the ping-pong wrote no result file"
sent_after=$(ip netns exec "$NAME-h1" tc -s qdisc show dev eth0 | awk '/Sent/ { print $2; exit }')

# The table: the first column named algbw (nccl-tests collectives: out of place) or bw
# (gradsync-bench pingpong), in GB/s, of the 4 MiB row.
algbw=$(echo "$res" | awk '
  /^#/ && / size / && !col {
    sub(/^#/, ""); for (i = 1; i <= NF; i++) if ($i == "algbw" || $i == "bw") { col = i; break }; next }
  !/^#/ && col && $1 == 4194304 { print $col; exit }')
[[ -n $algbw ]] || fail "no 4194304-byte row with an algbw/bw column in the output"
mbs=$(awk -v g="$algbw" 'BEGIN { printf "%.1f", g * 1000 }')
echo "ping-pong 4 MiB across the 1gbit link: $mbs MB/s one way (floor $FLOOR_MBS, ceiling $CEIL_MBS)"
awk -v m="$mbs" -v lo="$FLOOR_MBS" -v hi="$CEIL_MBS" 'BEGIN { exit !(m > lo && m < hi) }' ||
  fail "bandwidth $mbs MB/s is outside ($FLOOR_MBS, $CEIL_MBS): the link is not shaped, or not crossed"
crossed=$((sent_after - sent_before))
echo "host 1 sent $crossed bytes through its shaped eth0 during the run"
((crossed > 12 * 4194304)) || fail "host 1's link carried only $crossed bytes: the traffic did not cross it"
# The hosts' TCP congestion control is cubic by default (not this machine's, which may be
# bbr), and every rank's result says which one its host ran.
for h in 0 1; do
  c=$(ip netns exec "$NAME-h$h" cat /proc/sys/net/ipv4/tcp_congestion_control)
  [[ $c == cubic ]] || fail "host $h's TCP congestion control is '$c', expected the default cubic"
done
[[ $(echo "$res" | grep -c "TCP congestion control cubic") == 2 ]] ||
  fail "the footer does not say cubic for both ranks: $(echo "$res" | grep 'Interface bytes')"
# Two hosts, one machine: the file names two hostnames but one machine id (the kernel's boot
# id, which the namespaces share), and both ranks against this machine's CPUs.
share=$(/usr/bin/python3 -c '
import sys, h5py
a = h5py.File(sys.argv[1], "r").attrs
print(len(set(a["hostnames"])), len(set(a["machine_ids"])), int(a["machine_ranks"]), int(a["machine_cores"]))
' "$WORK/pp.h5") || fail "reading hostnames and machine ids from pp.h5"
[[ $share == "2 1 2 $cores" ]] ||
  fail "pp.h5: hostnames / machine ids / machine_ranks / machine_cores '$share', expected '2 1 2 $cores'"

tb down || fail "down"

# --mtu: every link of the testbed takes it (jumbo frames), status says it; a bad one is refused.
out=$(tb up --hosts 2 --rate 1gbit --subnet "$SUBNET" --cc no_such_cc 2>&1)
(($? == 3)) || fail "up --cc no_such_cc did not exit 3: $out"
[[ $out == *"no such TCP congestion control"* ]] || fail "up --cc no_such_cc: $out"
ip netns list | grep -q "^$NAME-h" && fail "up --cc no_such_cc left namespaces"
tb up --hosts 2 --rate 1gbit --subnet "$SUBNET" --mtu 9000 --cc reno || fail "testbed up --mtu 9000 --cc reno"
[[ $(ip netns exec "$NAME-h1" cat /proc/sys/net/ipv4/tcp_congestion_control) == reno ]] ||
  fail "host 1 does not run reno after up --cc reno"
[[ $(tb status) == *"TCP reno"* ]] || fail "status does not say TCP reno: $(tb status)"
for h in 0 1; do
  m=$(ip netns exec "$NAME-h$h" cat /sys/class/net/eth0/mtu)
  [[ $m == 9000 ]] || fail "host $h eth0 MTU is $m after up --mtu 9000"
done
[[ $(cat "/sys/class/net/$NAME-br0/mtu") == 9000 ]] || fail "bridge MTU is not 9000"
[[ $(tb status) == *"MTU 9000"* ]] || fail "status does not say MTU 9000: $(tb status)"
tb run --timeout 60 -- "$BENCH" --op pingpong -b 64K -e 64K -n 3 -w 1 >/dev/null || fail "a run over MTU 9000 links"
tb down || fail "down after --mtu"
out=$(tb up --hosts 2 --mtu 100 2>&1) && fail "up --mtu 100 was accepted"
[[ $out == *"--mtu must be"* ]] || fail "up --mtu 100: $out"

st=$(tb status) || fail "status after down exits non-zero: $st"
echo "$st"
[[ $st == *"nothing is up"* ]] || fail "status after down should say nothing is up, got: $st"
ip netns list | grep -q "^$NAME-h" && fail "namespaces left after down"
tb down >/dev/null 2>&1 || fail "down when nothing is up should succeed"
echo "PASS"
