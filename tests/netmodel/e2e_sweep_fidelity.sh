#!/bin/bash
# End-to-end: scripts/sweep_fidelity.sh on 2 ranks (real gradsync-bench runs, 2 iterations a
# size; its two host checks recomputed from the files), then --refit on its folder: the refit
# goes to a folder of its own, leaves the measured one as it was, and prices every fresh run
# as the first pass did (same build, same files, so the same lines). Bad --refit folders: one
# line, exit 2, nothing written.
# usage: e2e_sweep_fidelity.sh REPO BUILD_DIR WORKDIR
set -u
REPO=$1; export BUILD_DIR=$2; W=$3
rm -rf "$W"; mkdir -p "$W"
S="$REPO/scripts/sweep_fidelity.sh"
fail=0
FAILMSG() { echo "FAIL: $*"; fail=1; }

bash "$S" --ranks 2 --repeats 1 --iters 2 --out "$W/set" >"$W/first.txt" 2>&1 || { cat "$W/first.txt"; FAILMSG "first pass"; }
grep -q "^all: within 15%: [0-9]*/6;" "$W/first.txt" || FAILMSG "first pass: no 'all:' line over 6 runs: $(tail -3 "$W/first.txt")"
# The host checks, recomputed here from the files (medians over iterations): each size's fresh
# ring against the sweep's own ring point, and rabenseifner / ring (the same exchanges on 2
# ranks); the held count covers rabenseifner and rd of whole repeats.
/usr/bin/python3 - "$W/set" >"$W/want" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
def med(f, size):
    with h5py.File(f"{d}/{f}", "r") as h:
        return dict(zip(h["size_bytes"][:].tolist(), np.median(h["oop/time_us"][:], axis=1)))[size]
for mb in (1, 16):
    s, f, r = (med(x, mb << 20) for x in ("ring-2.h5", "fresh-2-ring-1.h5", "fresh-2-rabenseifner-1.h5"))
    print(f"  the sweep's own ring at {mb} MiB: {s:.0f} us; the fresh ring's repeats {f / s:.2f}x that")
    print(f"  rabenseifner / ring, the same exchanges on 2 ranks, {mb} MiB: {r / f:.2f} in the repeats")
PY
while IFS= read -r want; do
  grep -Fxq -- "$want" "$W/first.txt" || FAILMSG "host check: no line '$want'; got: $(grep -E "own ring|same exchanges" "$W/first.txt")"
done <"$W/want"
[ "$(wc -l <"$W/want")" = 4 ] || FAILMSG "host check: expected 4 recomputed lines, got $(wc -l <"$W/want")"
grep -Eq "^all: .*; rabenseifner and rd where the fresh ring held: [0-4]/[024]$" "$W/first.txt" ||
  FAILMSG "no held count (rabenseifner and rd of whole repeats): $(grep '^all:' "$W/first.txt")"
before=$(cd "$W/set" && find . -type f -exec md5sum {} + | sort)

bash "$S" --refit "$W/set" --ranks 2 >"$W/refit.txt" 2>&1 || { cat "$W/refit.txt"; FAILMSG "refit"; }
after=$(cd "$W/set" && find . -path ./refit-\* -prune -o -type f -exec md5sum {} + | sort)
[ "$before" = "$after" ] || FAILMSG "refit changed the measured folder"
refits=("$W"/set/refit-*)
[ ${#refits[@]} = 1 ] && [ -f "${refits[0]}/fidelity.txt" ] && [ -f "${refits[0]}/fabric-2.toml" ] ||
  FAILMSG "refit: no refit-<UTC>/ with fidelity.txt and fabric-2.toml: ${refits[*]}"
# The same prices: every per-run line of the first pass is in the refit's output.
grep "^N=2 " "$W/set/fidelity.txt" | sort >"$W/a"
grep "^N=2 " "${refits[0]}/fidelity.txt" | sort >"$W/b"
[ -s "$W/a" ] && cmp -s "$W/a" "$W/b" || { FAILMSG "refit priced the runs differently"; diff "$W/a" "$W/b"; }
[ "$(grep -c '^N=2 ' "$W/a")" = 6 ] || FAILMSG "expected 6 priced runs (3 algorithms x 2 sizes), got $(grep -c '^N=2 ' "$W/a")"

# Bad folders: one line naming the folder, exit 2, no refit folder made.
bash "$S" --refit "$W/nosuch" >"$W/out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "nosuch: no such folder" "$W/out" && [ "$(wc -l <"$W/out")" = 1 ] || { FAILMSG "missing folder: rc $rc"; cat "$W/out"; }
mkdir -p "$W/empty"
bash "$S" --refit "$W/empty" >"$W/out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "no pp-2.h5 there" "$W/out" && [ -z "$(ls -A "$W/empty")" ] || { FAILMSG "folder without sweeps: rc $rc, left $(ls -A "$W/empty")"; cat "$W/out"; }
bash "$S" --refit >"$W/out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q -- "--refit needs a value" "$W/out" || { FAILMSG "--refit without a folder: rc $rc"; cat "$W/out"; }
# --help: the whole header, down to its last usage line.
bash "$S" --help >"$W/out" 2>&1; rc=$?
[ $rc = 0 ] && grep -q "^#   scripts/sweep_fidelity.sh --refit DIR" "$W/out" && tail -1 "$W/out" | grep -q "DIR's own stay as they are" ||
  { FAILMSG "--help: rc $rc, not the whole header"; cat "$W/out"; }
bash "$S" --bogus >"$W/out" 2>&1; rc=$?
[ $rc = 2 ] && grep -q "unknown option '--bogus'" "$W/out" || { FAILMSG "unknown option: rc $rc"; cat "$W/out"; }

[ $fail = 0 ] && echo "e2e_sweep_fidelity: ok"
exit $fail
