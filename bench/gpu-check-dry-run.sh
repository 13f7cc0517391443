#!/usr/bin/env bash
# bench/gpu-check-dry-run.sh [BUILD_DIR] — runs bench/gpu-check.sh's side-by-side end to end on an
# emulator build (FERRY_CUDA=EMU: scripts/build.sh emu or asan; default build-emu), so that the
# script the next lent GPU runs first cannot rot. Not a measurement: the CUDA code runs on the host
# (tests/cuda_emu) and llama-bench is replaced by bench/llama_bench_standin.py, a clearly-labelled
# stand-in that prints llama-bench-shaped JSON (avg_ts 1.0) — only here, never on a GPU.
#
# A tiny synthetic model, two "cards" of 129 and 128 MiB (the emulator's device has 512 MiB here;
# bench_ballast holds the rest for llama-bench's stand-in; the emulator's memory is per process, so
# each Ferry run gets the card's size as FERRY_CUDA_EMU_MEMORY and fits it with --fit-target 1 —
# its CUDA workspaces take 125 MiB, so a budget of 128M/127M leaves a partial expert cache), -p 2 -n 2 -r 1 without warm-up, 2 threads, depth 4. Fails unless the
# ratio table has every row with a Ferry figure, unless the kernel-times section printed its three
# tables (resident, a 128M budget, resident unfused; -n 4), each with its sum and host CPU lines,
# and unless the decode-switch section has its ten rows (default, --cuda-pdl, --cuda-no-fusion,
# --cuda-graphs on twice each, resident; default and --cuda-pdl at 129M), each with t/s and host
# ms/tok. ctest runs it as gpu.GpuCheckDryRun (each emulated ferry run takes 5–10 s on the 2-core
# machine).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="$(cd "${1:-$root/build-emu}" && pwd)"
for f in "$build/ferry" "$build/bench/bench_ballast" "$build/tests/gpu_test_e2e"; do
  [[ -x "$f" ]] || { echo "gpu-check-dry-run: $f is not built (an emulator build: scripts/build.sh emu)" >&2; exit 2; }
done
grep -q '^FERRY_CUDA:STRING=EMU' "$build/CMakeCache.txt" ||
  { echo "gpu-check-dry-run: $build is not an emulator build (FERRY_CUDA=EMU)" >&2; exit 2; }

work="$(mktemp -d "${TMPDIR:-/tmp}/ferry-gpu-dry.XXXXXX")"
trap 'rm -rf "$work"' EXIT
# A bundle of just the two programs the side-by-side needs (gpu-check.sh runs every test program
# it finds in bin/; those have their own ctest entries), and gpu_test_e2e cut to one quick test by
# a wrapper, so that the script's second run of it with FERRY_TEST_GDN_PREFILL=chunked and that
# run's verdict section are exercised too (the plumbing, not the numerics: ~2 s).
mkdir -p "$work/bundle/bin" "$work/bundle/lib"
ln -s "$build/ferry" "$work/bundle/bin/ferry"
ln -s "$build/bench/bench_ballast" "$work/bundle/bin/bench_ballast"
printf '#!/bin/sh\nexec "%s" --gtest_filter=GpuE2eKvQuant.StateTakesTheFootprintFromTheBudget "$@"\n' \
  "$build/tests/gpu_test_e2e" > "$work/bundle/bin/gpu_test_e2e"
chmod +x "$work/bundle/bin/gpu_test_e2e"

FERRY_CUDA_EMU_MEMORY=512 OUT="$work/out" GPU_E2E_DIR="$work/models" GPU_E2E_PRESET=tiny GPU_CHECK_E2E=0 \
  GPU_E2E_TYPES="" GPU_CHECK_BUDGET_S=260 GPU_CHECK_SBS_S=180 GPU_CHECK_KTIME_VRAM=128M GPU_CHECK_KTIME_N=4 \
  GPU_CHECK_KTIME_ARGS="--fit-target 1" GPU_CHECK_PDL_VRAM=129M GPU_CHECK_PDL_ARGS="-n 2 -r 1 --fit-target 1" \
  GPU_CHECK_LLAMA_BENCH="$root/bench/llama_bench_standin.py" \
  GPU_CHECK_SBS_ARGS="--cards 129M,128M --margin 1M --reserve 1M -p 2 -n 2 -r 1 --no-warmup --threads 2 -d 4 --est-s 1 --emulated" \
  bash "$root/bench/gpu-check.sh" "$work/bundle" > "$work/gpu-check.log" 2>&1 || true
cat "$work/gpu-check.log"

table="$work/out/sidebyside/sidebyside.md"
[[ -f "$table" ]] || { echo "gpu-check-dry-run: FAIL: no side-by-side table" >&2; exit 1; }
grep -q 'STAND-IN' "$table" || { echo "gpu-check-dry-run: FAIL: the table does not name the stand-in" >&2; exit 1; }
# Expected rows: resident, the 129M and the 128M card (pp2 and tg2 each), depth (tg2 @ d4): 7, each
# with a Ferry model figure and its ratio to the stand-in's 1.0; the card rows with both routings.
n_rows=$(grep -cE '^\| (resident|129M|128M) \| 2 \| ' "$table" || true)
n_ok=$(grep -cE '^\| [^|]+ \| 2 \| [^|]+ \| 1\.00 \([^)]*\) \| [0-9.]+ \| [0-9.]+ \|' "$table" || true)
n_loc=$(grep -cE '^\| 12[98]M \| 2 \| [^|]+ \| [^|]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|' "$table" || true)
echo "gpu-check-dry-run: $n_rows rows, $n_ok with Ferry and the stand-in, $n_loc card rows with both routings"
((n_rows == 7 && n_ok == 7 && n_loc == 4)) || { echo "gpu-check-dry-run: FAIL: expected 7, 7 and 4" >&2; exit 1; }
grep -q '^| side-by-side .*| PASS ' "$work/gpu-check.log" || { echo "gpu-check-dry-run: FAIL: no PASS row in the summary" >&2; exit 1; }
# The kernel-times section: the three runs (resident, 128M, resident --cuda-no-fusion) passed, each with its table (labelled as emulator times) in
# the summary, and the sum against the wall line.
for name in kernel-times-resident kernel-times-128M kernel-times-nofusion; do
  grep -q "^| $name .*| PASS " "$work/gpu-check.log" || { echo "gpu-check-dry-run: FAIL: no PASS row for $name" >&2; exit 1; }
done
summary="$(sed -n '/^== kernel times of the decode/,/^== decode switches\|^== offload\|^| program/p' "$work/gpu-check.log")"
n_tables=$(grep -c '^kernel times, tg4 .*CUDA emulator.*NOT GPU timings' <<<"$summary" || true)
n_sums=$(grep -c '^sum of kernel times [0-9.]* µs/token vs wall [0-9.]* µs/token' <<<"$summary" || true)
n_kernels=$(grep -cE '^\| [a-z_]+[^|]* \| [0-9.]+ \| [0-9.]+ \| [0-9.]+% \| [0-9.]+ \|$' <<<"$summary" || true)
n_host=$(grep -c '^host CPU [0-9.]* µs/token vs wall [0-9.]* µs/token' <<<"$summary" || true)
echo "gpu-check-dry-run: kernel times: $n_tables tables, $n_sums sums, $n_host host CPU lines, $n_kernels kernel rows"
((n_tables == 3 && n_sums == 3 && n_host == 3 && n_kernels >= 15)) ||
  { echo "gpu-check-dry-run: FAIL: expected 3 kernel-time tables with rows, sums and host CPU lines" >&2; exit 1; }
# The decode-switch rows: ten runs, each with a figure and the host CPU per token.
n_sw=$(grep -cE '^\| (none|129M) \| (default|--cuda-pdl|--cuda-no-fusion|--cuda-graphs on) \| [0-9.]+ ± [0-9.]+ t/s \| [0-9.]+ \|' \
  "$work/gpu-check.log" || true)
n_graphs=$(grep -cE '^\| none \| --cuda-graphs on \| [0-9.]+ ± ' "$work/gpu-check.log" || true)
echo "gpu-check-dry-run: $n_sw decode-switch rows with a figure and host ms/tok ($n_graphs with --cuda-graphs on)"
((n_sw == 10 && n_graphs == 2)) || { echo "gpu-check-dry-run: FAIL: expected 10 decode-switch rows, 2 with graphs" >&2; exit 1; }
# gpu_test_e2e twice (the default form, then chunked) and the verdict of the second run.
for name in gpu_test_e2e gpu_test_e2e-gdn-chunked; do
  grep -q "^| $name .*| PASS " "$work/gpu-check.log" || { echo "gpu-check-dry-run: FAIL: no PASS row for $name" >&2; exit 1; }
done
grep -q '^PASS: no test fails with chunked that passed with the default form' "$work/gpu-check.log" ||
  { echo "gpu-check-dry-run: FAIL: no verdict of the chunked gpu_test_e2e run" >&2; exit 1; }
echo "gpu-check-dry-run: PASS"
