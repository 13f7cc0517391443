#!/usr/bin/env bash
# scripts/test.sh — install dependencies, build, and run the whole test suite (what CI runs).
#   scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit   or   -R gguf
# Labels: unit, model, oracle (against llama.cpp through the project venv), gpu (skips without GPU).
# The AddressSanitizer/UBSan build of the GGUF parser and tokenizer tests (hostile files) and of the
# offload executor tests (threads, streams) also runs, and so do the GPU tests and the CLI's cuda
# offload test on the CUDA emulator (tests/cuda_emu: the CUDA code compiled for the host).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
bash scripts/install-deps.sh
bash scripts/fetch-test-data.sh
bash scripts/build.sh release
ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900 "$@"
if [[ $# -eq 0 ]]; then
  # Sanitizer pass over the parser of untrusted files (the GGUF malformed-file corpus).
  # The GGUF reader and the tokenizer's vocabulary loader both parse untrusted files.
  asan_targets=""
  for d in gguf tokenizer; do
    asan_targets+=" $(cd tests/$d && ls test_*.cpp | sed "s/^/${d}_/; s/\.cpp$//" | tr '\n' ' ')"
  done
  # And the offload executor: streams, events and worker threads of the sim device, every flow.
  asan_targets+=" offload_test_offload_executor"
  FERRY_TARGETS="$asan_targets" bash scripts/build.sh asan -DFERRY_BENCH=OFF >/dev/null
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)" -R '^(gguf|tokenizer)\.|^offload\.OffloadExecutorTest\.' \
    --no-tests=error
  # The CUDA backend on the CUDA emulator: every GPU test and the CLI's cuda offload run, no GPU.
  emu_targets="$(cd tests/gpu && ls test_*.cpp | sed 's/^/gpu_/; s/\.cpp$//' | tr '\n' ' ')"
  emu_targets+=" cuda_emu_test_emulator offload_test_offload_cli ferry"
  FERRY_TARGETS="$emu_targets" bash scripts/build.sh emu -DFERRY_BENCH=OFF >/dev/null
  ctest --test-dir build-emu --output-on-failure -j"$(nproc)" --timeout 900 -L gpu --no-tests=error
  ctest --test-dir build-emu --output-on-failure --timeout 900 -R '^offload\.OffloadCli\.Cuda' --no-tests=error
fi
