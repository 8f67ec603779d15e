#!/bin/bash
# check_gpu_check.sh GPU_CHECK_SH BUILD_DIR OUT_DIR — CTest test gpucheck.run_from_build.
#
# Runs `gpu-check.sh run --from-build BUILD_DIR --out OUT_DIR` and checks its table:
#   * exit status 0, OUT_DIR/gpu-check.txt with the header "check result figure target",
#     gpu-check.log and gpu-check-results.tar.gz (which holds the table too);
#   * no row FAILED; every row's result is PASS, SKIP, WARN or INFO;
#   * rows of every step are there (0 launch, a unit tests, b NCCL, c ranks, d training,
#     e kernels, f compressors);
#   * CPU parts ran: the 2-rank launch, gradsync-compress-ref and (when built) the
#     fp16/bf16 training are PASS;
#   * without a usable GPU (cuda_probe says 0, or no CUDA build) the GPU rows b, c.ring and
#     e are SKIP with a reason; with one they are PASS.
set -u
script=$1 build=$2 out=$3
rm -rf "$out"
mkdir -p "$out"
fail() {
  echo "FAIL: $*"
  [ -f "$out/gpu-check.txt" ] && cat "$out/gpu-check.txt"
  exit 1
}

"$script" run --from-build "$build" --out "$out" --budget 600 >"$out/stdout.txt" 2>&1
rc=$?
cat "$out/stdout.txt"
[ $rc = 0 ] || fail "gpu-check.sh run exited $rc"
t=$out/gpu-check.txt
[ -s "$t" ] || fail "no table $t"
[ -s "$out/gpu-check.log" ] || fail "no full log"
tar tzf "$out/gpu-check-results.tar.gz" 2>/dev/null | grep -q 'gpu-check.txt' || fail "results tar missing or without the table"
grep -qE '^check +result +figure +target' "$t" || fail "no table header"

rows=$(grep -E '^[0-9a-f]\.' "$t")
[ "$(wc -l <<<"$rows")" -ge 8 ] || fail "too few rows"
bad=$(awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^(PASS|FAIL|SKIP|WARN|INFO)$/) { r = $i; break } } r == "" || r == "FAIL" { print } { r = "" }' <<<"$rows")
[ -z "$bad" ] || fail "rows failed or without a result: $bad"
for p in 0 a b c d e f; do grep -q "^$p\." <<<"$rows" || fail "no row of step $p"; done

result_of() { grep -E "^$1" <<<"$rows" | awk '{ for (i = 2; i <= NF; i++) if ($i ~ /^(PASS|FAIL|SKIP|WARN|INFO)$/) { print $i; exit } }'; }
[ "$(result_of '0\.mpirun -np 2')" = PASS ] || fail "the 2-rank launch did not pass"
[ "$(result_of 'f\.gradsync-compress-ref')" = PASS ] || fail "gradsync-compress-ref did not pass"
if [ -x "$build/bin/gradsync-train" ]; then
  for p in fp16 bf16; do [ "$(result_of "d\.train mlp $p")" = PASS ] || fail "training $p did not pass"; done
fi

ngpu=0
[ -x "$build/tests/cuda_probe" ] && read -r ngpu _ < <("$build/tests/cuda_probe")
for r in 'b\.nccl' 'c\.ring, 2' 'c\.ring, 4' 'e\.'; do
  res=$(result_of "$r")
  if [ "$ngpu" = 0 ]; then
    [ "$res" = SKIP ] || fail "row $r is $res without a GPU, expected SKIP"
    grep -E "^$r" <<<"$rows" | grep -qiE 'no usable CUDA device|not built|no CUDA' || fail "row $r gives no reason"
  else
    [ "$res" = PASS ] || [ "$res" = INFO ] || [ "$res" = WARN ] || fail "row $r is $res with a GPU"
  fi
done
echo "PASS: table with $(wc -l <<<"$rows") rows, none failed ($( [ "$ngpu" = 0 ] && echo 'no GPU: GPU rows skipped' || echo "$ngpu GPU(s)"))"
