#!/usr/bin/env bash
# scripts/test.sh — install dependencies, build, and run the whole test suite (what CI runs).
#   scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit   or   -R gguf
# Labels: unit, model, oracle (against llama.cpp through the project venv), gpu (skips without GPU).
# Then an AddressSanitizer/UBSan build runs the GGUF parser and tokenizer tests (hostile files), the
# offload executor tests (threads, streams), and — on the CUDA emulator (tests/cuda_emu: the CUDA
# code compiled for the host) — every GPU test and the CLI's cuda offload test; and `ferry serve`
# (its unit tests, the load, hostile-input and lifecycle tests) under ASan/LSan.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/install-deps.sh
bash scripts/fetch-test-data.sh
bash scripts/build.sh release
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@"
if [[ $# -eq 0 ]]; then
  # Sanitizer pass (AddressSanitizer + UBSan) with the CUDA backend on the CUDA emulator
  # (tests/cuda_emu): the parsers of untrusted files (the GGUF malformed-file corpus, tokenizer
  # vocabularies), the offload executor (threads, streams, events of the sim device, every flow),
  # and every GPU test plus the CLI's cuda offload run — a kernel's out-of-bounds access is an ASan
  # report here, as compute-sanitizer's memcheck would report it on a GPU.
  asan_targets=""
  for d in gguf tokenizer gpu; do
    asan_targets+=" $(cd tests/$d && ls test_*.cpp | sed "s/^/${d}_/; s/\.cpp$//" | tr '\n' ' ')"
  done
  asan_targets+=" offload_test_offload_executor offload_test_offload_cli cuda_emu_test_emulator ferry"
  asan_targets+=" server_test_server_units server_test_chat_prompt bench_ballast"  # bench_ballast: gpu.GpuCheckDryRun
  FERRY_TARGETS="$asan_targets" bash scripts/build.sh asan -DFERRY_BENCH=ON >/dev/null
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)" --timeout 900 --no-tests=error \
    -R '^(gguf|tokenizer)\.|^offload\.OffloadExecutorTest\.|^offload\.OffloadCli\.Cuda'
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)" --timeout 900 --no-tests=error -L gpu
  # `ferry serve` under AddressSanitizer/LeakSanitizer: its unit tests, then the load (none lost,
  # none crossed; no RSS check, ASan's own memory would drown it), hostile-input and lifecycle
  # tests against the sanitized binary — a leak or a bad access fails the server's exit.
  ctest --test-dir build-asan --output-on-failure --timeout 900 --no-tests=error -R '^server\.[A-Z]'
  mkdir -p build-asan/server-scratch
  for t in test_load test_fuzz test_lifecycle; do
    echo "[test] asan: tests/server/$t.py"
    FERRY_BIN=build-asan/ferry FERRY_SOURCE_DIR="$root" FERRY_SCRATCH="$root/build-asan/server-scratch" \
      FERRY_LOAD_SKIP_RSS=1 .venv/bin/python "tests/server/$t.py"
  done
fi
