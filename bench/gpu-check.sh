#!/usr/bin/env bash
# bench/gpu-check.sh [BUNDLE_DIR] — the one script run on the GPU test machine (see
# bench/gpu-bundle.sh for how the bundle is made). Prints nvidia-smi, runs every backend and GPU
# test program, a compute-sanitizer memcheck pass over the kernel tests when the tool exists and
# time allows, then the GPU kernel benchmark, and prints a summary table LAST. Logs go to $OUT
# (when set, e.g. by the device runner) or gpu-check-out/. Total time stays under 8 minutes.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bundle="${1:-$root/gpu-bundle}"
logs="${OUT:-$root/gpu-check-out}"
mkdir -p "$logs"
budget_s=${GPU_CHECK_BUDGET_S:-450}
t_start=$SECONDS

cuda_lib=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib "$(dirname "$(command -v nvcc 2>/dev/null || echo /x)")/../lib64"; do
  [[ -d "$d" ]] && cuda_lib="$cuda_lib:$d"
done
export LD_LIBRARY_PATH="$bundle/lib$cuda_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname)"
nvidia-smi 2>&1 | head -20 | tee "$logs/nvidia-smi.txt"
echo "== cuBLAS on the library path: $(ldconfig -p 2>/dev/null | grep -c libcublas.so) (ldconfig) $(ls /usr/local/cuda/lib64/libcublas.so* 2>/dev/null | head -1)"
missing=$(for b in "$bundle"/bin/*; do ldd "$b" | grep "not found"; done | sort -u)
[[ -n "$missing" ]] && echo "== MISSING LIBRARIES:" && echo "$missing"

declare -a rows
run_prog() {  # name, timeout, command...
  local name="$1" tmo="$2"; shift 2
  local t0=$SECONDS rc
  timeout "$tmo" "$@" > "$logs/$name.log" 2>&1
  rc=$?
  local dt=$((SECONDS - t0))
  local passed failed skipped
  passed=$(grep -o '\[  PASSED  \] [0-9]*' "$logs/$name.log" | grep -o '[0-9]*$' | tail -1)
  failed=$(grep -c '^\[  FAILED  \] [A-Za-z]' "$logs/$name.log")
  skipped=$(grep -o '\[  SKIPPED \] [0-9]*' "$logs/$name.log" | grep -o '[0-9]*$' | tail -1)
  local verdict=PASS
  [[ "${passed:-0}" == 0 && "${skipped:-0}" != 0 ]] && verdict=SKIP
  ((rc == 124)) && verdict=TIMEOUT
  ((rc != 0 && rc != 124)) && verdict="FAIL(rc=$rc)"
  rows+=("$(printf '| %-28s | %-12s | %6s | %6s | %7s | %5ss |' "$name" "$verdict" "${passed:-0}" "$failed" "${skipped:-0}" "$dt")")
  echo "== $name: $verdict in ${dt}s"
  grep -E '^\[gpu-(op|info)\]|FAILED|Failure|error' "$logs/$name.log" | head -60
}

for b in "$bundle"/bin/backend_test_* "$bundle"/bin/gpu_test_*; do
  [[ -x "$b" ]] || continue
  run_prog "$(basename "$b")" 120 "$b" --gtest_color=no
done

run_prog "ferry-help" 20 "$bundle/bin/ferry" --help

# Memcheck over the kernel tests (slow: only while time is left).
if command -v compute-sanitizer >/dev/null || [[ -x /usr/local/cuda/bin/compute-sanitizer ]]; then
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for b in "$bundle"/bin/gpu_test_gpu_{ops,moe,deltanet,attention,matmul}; do
    [[ -x "$b" ]] || continue
    left=$((budget_s - (SECONDS - t_start) - 90))
    ((left < 20)) && { echo "== memcheck: skipped $(basename "$b") (time)"; continue; }
    tmo=$((left < 45 ? left : 45))
    run_prog "memcheck-$(basename "$b" | sed 's/gpu_test_gpu_//')" "$tmo" "$cs" --tool memcheck --error-exitcode 3 "$b" --gtest_color=no
  done
fi

left=$((budget_s - (SECONDS - t_start)))
if ((left > 30)); then
  quick=""; ((left < 120)) && quick=--quick
  run_prog "bench_gpu_kernels" $((left - 10)) "$bundle/bin/bench_gpu_kernels" $quick
  cp "$logs/bench_gpu_kernels.log" "$logs/bench.md" 2>/dev/null
  echo; cat "$logs/bench_gpu_kernels.log"
else
  echo "== bench_gpu_kernels: skipped (time)"
fi

echo
echo "== kernel checks: $(grep -h '^\[gpu-op\]' "$logs"/gpu_test_*.log 2>/dev/null | grep -c '| PASS$') PASS, $(grep -h '^\[gpu-op\]' "$logs"/gpu_test_*.log 2>/dev/null | grep -c '| FAIL$') FAIL"
grep -h '^\[gpu-op\].*| FAIL$' "$logs"/gpu_test_*.log 2>/dev/null | head -20
echo
echo "| program                      | result       | passed | failed | skipped |  time |"
echo "|------------------------------|--------------|--------|--------|---------|-------|"
printf '%s\n' "${rows[@]}"
echo "total $((SECONDS - t_start))s; logs in $logs"
