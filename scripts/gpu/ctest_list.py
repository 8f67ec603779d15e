#!/usr/bin/env python3
"""Turn the CTest tests of one label into a CTest-free list of commands (scripts/gpu-check.sh).

    ctest_list.py BUILD_DIR SOURCE_DIR [--label gpu] [--ctest CTEST] > tests.txt

Reads `ctest -N -L LABEL --show-only=json-v1` of BUILD_DIR and writes one line per test,
tab-separated:

    name  timeout_s  env  skip_regex  kind  command

  env         space-separated K=V (ENVIRONMENT property), or "-"
  skip_regex  SKIP_REGULAR_EXPRESSION (Python/ERE syntax), or "-"
  kind        "gtest": a whole GoogleTest binary (its discovered test cases collapsed
              into one run; all cases skipped = skipped), "cmd": the command as CTest runs it
  command     space-separated words with placeholders for the paths that differ on the
              machine that runs the list: @BIN@ (BUILD_DIR/bin), @TESTS@ (BUILD_DIR/tests),
              @SRC@ (SOURCE_DIR), @MPIEXEC@ (CMake's MPIEXEC_EXECUTABLE)

Tests whose command needs anything else of the build tree (libraries, CMake scripts with
build paths) cannot run from a carried copy: they are listed as "# not carried: NAME (why)".
The GPU check's own CTest test (gpucheck.*) is left out (it runs this list).
"""

import argparse
import collections
import json
import os
import re
import subprocess
import sys


def cache_value(build, key):
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                m = re.match(rf"^{re.escape(key)}:[A-Z]+=(.*)$", line.strip())
                if m:
                    return m.group(1)
    except OSError:
        pass
    return ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("source")
    ap.add_argument("--label", default="gpu")
    ap.add_argument("--ctest", default="")
    a = ap.parse_args()
    build = os.path.realpath(a.build)
    source = os.path.realpath(a.source)
    ctest = a.ctest or cache_value(build, "CMAKE_CTEST_COMMAND") or "ctest"
    mpiexec = cache_value(build, "MPIEXEC_EXECUTABLE")

    p = subprocess.run([ctest, "-N", "-L", a.label, "--show-only=json-v1"], cwd=build, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"ctest_list.py: ctest failed in {build}: {p.stderr.strip()}")
    tests = json.loads(p.stdout).get("tests", [])

    def place(word):
        for path, tag in ((os.path.join(build, "bin"), "@BIN@"), (os.path.join(build, "tests"), "@TESTS@")):
            if word.startswith(path + "/"):
                return tag + word[len(path):]
        if mpiexec and word == mpiexec:
            return "@MPIEXEC@"
        if word.startswith(source + "/") and not word.startswith(build + "/"):
            return "@SRC@" + word[len(source):]
        if build in word or re.search(r"\s", word):
            return None
        return word

    out = []
    gtests = collections.OrderedDict()  # exe -> (count, labels)
    for t in tests:
        name = t["name"]
        cmd = t.get("command") or []
        props = {p["name"]: p["value"] for p in t.get("properties", [])}
        if name.startswith("gpucheck.") or any("gpu-check.sh" in w for w in cmd):
            continue
        if name.endswith("_NOT_BUILT") or not cmd:
            out.append(f"# not built: {name}")
            continue
        words = [place(w) for w in cmd]
        if any(w is None for w in words):
            bad = next(w for w, p_ in zip(cmd, words) if p_ is None)
            out.append(f"# not carried: {name} (needs the build tree: {bad[:80]})")
            continue
        filt = [w for w in cmd[1:] if w.startswith("--gtest_filter=")]
        if filt and words[0].startswith(("@TESTS@", "@BIN@")) and words[0] != "@MPIEXEC@":
            n, _ = gtests.get(words[0], (0, None))
            gtests[words[0]] = (n + 1, props.get("ENVIRONMENT"))
            continue
        env = " ".join(props.get("ENVIRONMENT") or []) or "-"
        skip = props.get("SKIP_REGULAR_EXPRESSION")
        skip = skip[0] if isinstance(skip, list) and skip else (skip or "-")
        timeout = int(float(props.get("TIMEOUT") or 300))
        out.append("\t".join([name, str(timeout), env, skip, "cmd", " ".join(words)]))

    first = []
    for exe, (n, env) in gtests.items():
        name = os.path.basename(exe)
        first.append("\t".join([name, "300", " ".join(env or []) or "-", r"\[  PASSED  \] 0 tests", "gtest", exe]))
    print(f"# gradsync GPU check: tests labelled {a.label} of {build} (ctest_list.py)")
    print("# name\ttimeout_s\tenv\tskip_regex\tkind\tcommand")
    for line in first + out:
        print(line)


if __name__ == "__main__":
    main()
