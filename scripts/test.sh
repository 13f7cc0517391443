#!/usr/bin/env bash
# scripts/test.sh — install dependencies, build, and run the whole test suite (what CI runs).
#   scripts/test.sh [ctest args...]   e.g. scripts/test.sh -L unit   or   -R gguf
# Labels: unit, model, oracle (against llama.cpp through the project venv), gpu (skips without GPU).
# Then an AddressSanitizer/UBSan build runs the GGUF parser and tokenizer tests (hostile files), the
# offload executor tests (threads, streams), and — on the CUDA emulator (tests/cuda_emu: the CUDA
# code compiled for the host) — every GPU test and the CLI's cuda offload test.
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
  FERRY_TARGETS="$asan_targets" bash scripts/build.sh asan -DFERRY_BENCH=OFF >/dev/null
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)" --timeout 900 --no-tests=error \
    -R '^(gguf|tokenizer)\.|^offload\.OffloadExecutorTest\.|^offload\.OffloadCli\.Cuda'
  ctest --test-dir build-asan --output-on-failure -j"$(nproc)" --timeout 900 --no-tests=error -L gpu
fi
