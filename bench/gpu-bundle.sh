#!/usr/bin/env bash
# bench/gpu-bundle.sh [BUILD_DIR] [OUT_DIR] — collect what the GPU test machine needs into one
# folder (default BUILD_DIR/gpu-bundle, inside the ignored build tree) and an xz archive of it of at
# most 64 MiB (OUT_DIR.tar.xz, the file to carry): the ferry
# binary, the GPU and backend test programs, the GPU benchmarks (bench_gpu_*), and the shared
# libraries they load that a stock Ubuntu 24.04
# lacks (oneTBB, mimalloc, liburing, fmt, ...). libcudart is linked statically; libcuda comes with
# the driver there; cuBLAS is loaded at run time from the CUDA toolkit there when present. With
# .cache/llama.cpp-build/cuda (bench/build-llamacpp.sh cuda) built, its llama-bench goes along for
# the side-by-side that bench/gpu-check.sh runs first (bench/sidebyside.py), with bench_ballast.
#
# Build first (on this machine):
#   cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DFERRY_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90
#   ninja -C build-gpu ferry bench_gpu_kernels bench_gpu_e2e bench_ballast $(cd tests/gpu && ls test_*.cpp | sed 's/^/gpu_/; s/\.cpp$//') \
#         $(cd tests/backend && ls test_*.cpp | sed 's/^/backend_/; s/\.cpp$//')
#   bash bench/gpu-bundle.sh build-gpu gpu-bundle
# Then on the GPU machine, from the repository root: bash bench/gpu-check.sh gpu-bundle
# The device runner's 64 MiB counts the files git tracks too: run `bash bench/gpu-carry.sh out`
# before the call (the trained GGUFs stay home) and `bash bench/gpu-carry.sh in` after it, and
# carry OUT_DIR.tar.xz: GPU_CHECK_BUDGET_S=540 GPU_CHECK_SBS_S=380 GPU_CHECK_SBS_ARGS="--threads 16"
# bash bench/gpu-check.sh build/gpu-bundle.tar.xz fits one 10-minute call.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-gpu}"
out="${2:-$build/gpu-bundle}"
limit_bytes=$((64 * 1024 * 1024))

[[ -d "$build" ]] || { echo "gpu-bundle: no build directory $build" >&2; exit 2; }
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"

bins=()
# llama.cpp's CUDA llama-bench for the side-by-side (bench/build-llamacpp.sh cuda), when built.
llama_cuda="$root/.cache/llama.cpp-build/cuda/bin/llama-bench"
for f in "$build"/ferry "$build"/bench/bench_gpu_kernels "$build"/bench/bench_gpu_e2e "$build"/bench/bench_ballast "$build"/tests/gpu_test_* "$build"/tests/backend_test_* "$llama_cuda"; do
  [[ -f "$f" && -x "$f" ]] && bins+=("$f")
done
[[ ${#bins[@]} -gt 0 ]] || { echo "gpu-bundle: nothing built in $build" >&2; exit 2; }

# Libraries every Ubuntu 24.04 has (glibc, the GCC runtime) or that the NVIDIA driver provides.
is_system_lib() {
  case "$(basename "$1")" in
    linux-vdso*|ld-linux*|libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libstdc++.so*|libgcc_s.so*) return 0 ;;
    libcuda.so*|libnvidia*) return 0 ;;
    libcudart.so*|libcublas*.so*) return 0 ;;  # the CUDA 13 toolkit there (llama-bench links them)
    *) return 1 ;;
  esac
}

for b in "${bins[@]}"; do
  # Debug info stays here; the bundle carries symbol tables only (stack traces, sanitizer names).
  strip --strip-debug -o "$out/bin/$(basename "$b")" "$b"
  # A llama-bench built before GGML_CUDA_NCCL=OFF links libnccl (218 MB) for multi-GPU all-reduce
  # only; its calls are lazily bound (no BIND_NOW), so a single-GPU run never resolves them.
  if [[ "$b" == "$llama_cuda" ]] && readelf -d "$b" | grep -q 'libnccl'; then
    if command -v patchelf >/dev/null && ! readelf -d "$b" | grep -qE 'BIND_NOW|FLAGS.*NOW'; then
      patchelf --remove-needed libnccl.so.2 "$out/bin/llama-bench"
    else
      echo "gpu-bundle: llama-bench needs libnccl and cannot be patched; left out (rebuild: bench/build-llamacpp.sh cuda)" >&2
      rm -f "$out/bin/llama-bench"
      continue
    fi
  fi
  while read -r lib; do
    [[ -n "$lib" && -f "$lib" ]] || continue
    is_system_lib "$lib" && continue
    dest="$out/lib/$(basename "$lib")"
    [[ -f "$dest" ]] || cp -L "$lib" "$dest"
  done < <(ldd "$out/bin/$(basename "$b")" | awk '/=> \//{print $3} /^\t\//{print $1}')
done

# What the llama-bench is (llama-cpp-python version, vendored llama.cpp commit, compiler): the
# side-by-side names it above its table.
if [[ -f "$out/bin/llama-bench" && -f "$(dirname "$llama_cuda")/build-info.txt" ]]; then
  cp "$(dirname "$llama_cuda")/build-info.txt" "$out/bin/llama-bench.build-info.txt"
fi

total=$(du -sb "$out" | cut -f1)
echo "gpu-bundle: $(ls "$out/bin" | wc -l) programs, $(ls "$out/lib" | wc -l) libraries, $((total / 1024)) KiB in $out"
ls -la "$out/lib"
# What travels is the xz archive (CUDA fat binaries compress ~8x); gpu-check.sh unpacks it. The
# programs carry the same kernels (cubins) many times over, so a dictionary larger than the largest
# program lets xz keep one copy: ~55 MB instead of ~103 MiB with the default 8 MiB (about 4 GiB of
# memory while packing, the dictionary's size while unpacking). GPU_BUNDLE_XZ_DICT overrides it.
tar -cf - -C "$(dirname "$out")" "$(basename "$out")" | xz -T1 --lzma2="preset=6,dict=${GPU_BUNDLE_XZ_DICT:-400MiB}" > "$out.tar.xz"
packed=$(stat -c %s "$out.tar.xz")
echo "gpu-bundle: $out.tar.xz, $((packed / 1024)) KiB (carry it: bash bench/gpu-check.sh $(basename "$out").tar.xz)"
if (( packed > limit_bytes )); then
  echo "gpu-bundle: $packed bytes exceeds the 64 MiB limit" >&2
  exit 1
fi
# The device runner's 64 MiB covers the files git tracks too; the trained reference models
# (tests/data/trained, not used on the GPU machine) are most of them. Say what room is left.
if tracked=$(cd "$root" && git ls-files -z 2>/dev/null | xargs -0 du -cb 2>/dev/null | tail -1 | cut -f1) && [[ -n "$tracked" ]]; then
  if (( packed + tracked > limit_bytes )); then
    echo "gpu-bundle: the archive ($((packed / 1024)) KiB) and the tracked tree ($((tracked / 1024)) KiB) together exceed 64 MiB;" \
         "for the run, leave tests/data/trained out of the index: bash bench/gpu-carry.sh out, and bash bench/gpu-carry.sh in after it" >&2
  fi
fi
