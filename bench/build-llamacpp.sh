#!/usr/bin/env bash
# Builds llama.cpp's llama-bench without internet access beyond PyPI: the llama.cpp source is the
# one vendored in llama-cpp-python's source distribution (the version installed in .venv, so the
# benchmark and the oracle tests use the same llama.cpp).
#
#   bench/build-llamacpp.sh [cpu|cpu-noamx|cpu-pinned|cuda]      (default cpu)
#
#   cpu   -DGGML_NATIVE=ON, CPU backend only     → .cache/llama.cpp-build/cpu/bin/llama-bench
#   cpu-noamx  the same with the compiler's AMX extensions off (-mno-amx-*), so ggml has no AMX
#         path even on a CPU that reports AMX   → .cache/llama.cpp-build/cpu-noamx/bin/llama-bench
#   cpu-pinned  the flags scripts/install-deps.sh builds the venv's llama-cpp-python with (AVX2, FMA,
#         F16C, not native): the same logits as the oracle library, bit for bit; the llama-perplexity
#         whose files and statistics ferry perplexity is checked against
#                                               → .cache/llama.cpp-build/cpu-pinned/bin/llama-perplexity
#   cuda  -DGGML_CUDA=ON for sm_90 (H200/H100)   → .cache/llama.cpp-build/cuda/bin/llama-bench
#         (AVX-512 host code: build it here, bench/gpu-bundle.sh takes it to the GPU machine)
#
# Only the llama-bench target is built (ggml + llama + the tool), so the CUDA variant fits a short
# session on the GPU machine (about 5–8 min on 16 cores: the CUDA template instances dominate).
# Idempotent: a finished build is only checked. Prints the binary's path as its last line. Next to
# the binary, build-info.txt names the build (variant, version, the CPU's AMX flags and whether the
# kernel grants a process AMX tile state): every recorded figure names the build it used.
# About AMX: ggml requests the tile state itself (arch_prctl ARCH_REQ_XCOMP_PERM) and falls back
# when it is refused. Built with GCC 12, a CPU that reports AMX and grants it crashed in ggml's AMX
# matmul (SIGSEGV at the first ldtilecfg in ggml_backend_amx_mul_mat): GCC 12's _tile_loadconfig
# is an asm statement whose memory operand covers only the first 8 bytes of the 64-byte tile
# config, so the compiler may drop the stores that fill the rest (seen: palette 1, every row and
# column count 0 or garbage), and ldtilecfg faults on the invalid config. The cpu variants
# therefore build with clang (its AMX intrinsics are builtins) when the C++ compiler is GCC < 13
# and clang is installed (FERRY_LLAMACPP_CC/CXX override).
#
#   FERRY_PYTHON                      python whose pip downloads the sdist (default .venv/bin/python)
#   FERRY_LLAMA_CPP_PYTHON_VERSION    version of the sdist (default: the one installed, else 0.3.36)
#   FERRY_LLAMACPP_JOBS               parallel build jobs (default: nproc)
#   FERRY_CUDA_ARCH                   CUDA architectures for the cuda variant (default 90)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
variant="${1:-cpu}"
case "$variant" in cpu | cpu-noamx | cpu-pinned | cuda) ;; *)
  echo "usage: $0 [cpu|cpu-noamx|cpu-pinned|cuda]" >&2
  exit 2
  ;;
esac
cache="$root/.cache"
jobs="${FERRY_LLAMACPP_JOBS:-$(nproc)}"

py="${FERRY_PYTHON:-$root/.venv/bin/python}"
[[ -x "$py" ]] || py=python3
version="${FERRY_LLAMA_CPP_PYTHON_VERSION:-}"
if [[ -z "$version" ]]; then
  version="$("$py" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)"
fi
if [[ -z "$version" ]]; then
  version=0.3.36
  echo "[build-llamacpp] llama-cpp-python is not installed in $py; using the source of $version" >&2
fi

src_root="$cache/llama.cpp-src/$version"
src="$src_root/llama.cpp"
build="$cache/llama.cpp-build/$variant"
bin="$build/bin/llama-bench"
stamp="$build/.ferry-version"
# The compilers (see "About AMX" above): named in the stamp, so a change rebuilds.
cc="${FERRY_LLAMACPP_CC:-}" cxx="${FERRY_LLAMACPP_CXX:-}"
if [[ -z "$cxx" && "$variant" != cuda && "$variant" != cpu-pinned ]]; then  # pinned: the compiler pip used
  gcc_major="$(c++ -dumpfullversion 2>/dev/null | cut -d. -f1 || true)"
  if c++ -v 2>&1 | grep -q '^gcc version' && [[ -n "$gcc_major" && "$gcc_major" -lt 13 ]]; then
    for v in "" -14 -15 -16; do
      if command -v "clang++$v" >/dev/null 2>&1 && command -v "clang$v" >/dev/null 2>&1; then
        cc="clang$v" cxx="clang++$v"
        break
      fi
    done
  fi
fi
compilers="${cxx:-default}"

if [[ -x "$bin" && -f "$stamp" && "$(cat "$stamp")" == "$version $compilers" ]]; then
  echo "[build-llamacpp] $bin: present (llama-cpp-python $version)" >&2
  echo "$bin"
  exit 0
fi

if [[ ! -f "$src/CMakeLists.txt" ]]; then
  sdist_dir="$cache/sdist"
  mkdir -p "$sdist_dir"
  sdist="$(ls "$sdist_dir"/llama_cpp_python-"$version".tar.gz 2>/dev/null || true)"
  if [[ -z "$sdist" ]]; then
    if ! "$py" -m pip --version >/dev/null 2>&1; then
      echo "[build-llamacpp] $py has no pip and $sdist_dir holds no llama_cpp_python-$version.tar.gz" >&2
      exit 1
    fi
    echo "[build-llamacpp] downloading the llama-cpp-python $version source distribution" >&2
    "$py" -m pip download -q --no-deps --no-binary :all: -d "$sdist_dir" "llama-cpp-python==$version"
    sdist="$(ls "$sdist_dir"/llama_cpp_python-"$version".tar.gz)"
  fi
  # Unpack only vendor/llama.cpp into a temporary folder, then move it into place, so an
  # interrupted run never leaves a half-extracted tree that looks complete.
  tmp="$(mktemp -d "$cache/llama.cpp-src.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  echo "[build-llamacpp] unpacking vendor/llama.cpp from $sdist" >&2
  tar -xzf "$sdist" -C "$tmp" "llama_cpp_python-$version/vendor/llama.cpp"
  mkdir -p "$src_root"
  rm -rf "$src"
  mv "$tmp/llama_cpp_python-$version/vendor/llama.cpp" "$src"
fi

flags=()
[[ -n "$cc" ]] && flags+=("-DCMAKE_C_COMPILER=$cc")
[[ -n "$cxx" ]] && flags+=("-DCMAKE_CXX_COMPILER=$cxx")
flags+=(-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_TOOLS=ON)
if [[ "$variant" == cpu ]]; then
  flags+=(-DGGML_NATIVE=ON -DGGML_CUDA=OFF)
elif [[ "$variant" == cpu-pinned ]]; then
  flags+=(-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_CUDA=OFF)
elif [[ "$variant" == cpu-noamx ]]; then
  # -march=native turns AMX on where the CPU reports it; -mno-amx-* after it turns it back off, so
  # ggml's AMX buffer type is not compiled.
  noamx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
  flags+=(-DGGML_NATIVE=ON -DGGML_CUDA=OFF "-DCMAKE_C_FLAGS=$noamx" "-DCMAKE_CXX_FLAGS=$noamx")
else
  command -v nvcc >/dev/null 2>&1 || [[ -x /usr/local/cuda/bin/nvcc ]] || {
    echo "[build-llamacpp] cuda: nvcc not found" >&2
    exit 1
  }
  # Built here and taken to the GPU machine (shared/GPU.md: its CPU has AVX-512, VNNI and AMX), so
  # the host ISA is named rather than detected: AVX-512 with VNNI and BF16 for the CPU layers of
  # --n-cpu-moe. cudart and cuBLAS are the toolkit's shared libraries there (CUDA 13).
  flags+=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_AVX512=ON
    -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_CUDA=ON -DGGML_CUDA_NCCL=OFF
    "-DCMAKE_CUDA_ARCHITECTURES=${FERRY_CUDA_ARCH:-90}")  # NCCL: multi-GPU only, and 218 MB to carry
  [[ -x /usr/local/cuda/bin/nvcc ]] && flags+=(-DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc)
fi
gen=()
command -v ninja >/dev/null 2>&1 && gen=(-G Ninja)

mkdir -p "$build"
# A build made with other compilers or flags starts over; an interrupted one with the same resumes
# where it stopped (the CUDA variant is hours of work at one or two jobs: it spans sessions).
configured="$version ${flags[*]}"
if [[ "$(cat "$build/.ferry-configured" 2>/dev/null)" != "$configured" ]]; then
  rm -rf "$build/CMakeCache.txt" "$build/CMakeFiles"
fi
echo "$configured" >"$build/.ferry-configured"
echo "[build-llamacpp] configuring $variant in $build" >&2
cmake -S "$src" -B "$build" "${gen[@]}" "${flags[@]}" >"$build.configure.log" 2>&1 || {
  tail -n 30 "$build.configure.log" >&2
  exit 1
}
# llama-perplexity too (cpu variants): the reference for `ferry perplexity`'s KL-divergence files.
targets=(llama-bench); [[ "$variant" != cuda ]] && targets+=(llama-perplexity)
echo "[build-llamacpp] building ${targets[*]} with $jobs jobs (log: $build.build.log)" >&2
cmake --build "$build" --target "${targets[@]}" -j "$jobs" >"$build.build.log" 2>&1 || {
  tail -n 30 "$build.build.log" >&2
  exit 1
}
[[ -x "$bin" ]] || {
  echo "[build-llamacpp] the build finished without $bin" >&2
  exit 1
}
# What this build is, for the figures made with it.
amx_flags="$(grep -m1 '^flags' /proc/cpuinfo | grep -o 'amx[a-z0-9_]*' 2>/dev/null | sort -u | tr '\n' ' ' || true)"
amx_perm="$("$py" - <<'PY' 2>/dev/null || echo unknown
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
# arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), as ggml's AMX init asks for it
r = libc.syscall(158, 0x1023, 18)
print("granted" if r == 0 else "refused (" + os.strerror(ctypes.get_errno()) + ")")
PY
)"
case "$variant" in
  cpu) amx_built=$([[ -n "$amx_flags" ]] && echo "yes (-march=native on a CPU with ${amx_flags% })" || echo "no (the CPU reports no AMX)") ;;
  cpu-noamx) amx_built="no (-mno-amx-*)" ;;
  cpu-pinned) amx_built="no (AVX2/FMA/F16C only, as the venv's llama-cpp-python)" ;;
  *) amx_built="no (host ISA named: AVX-512, VNNI, BF16)" ;;
esac
# The vendored llama.cpp commit: the sdist carries llama-cpp-python's .git, whose tree records the
# vendor/llama.cpp submodule as a gitlink (the build number is not in the sdist).
vendored="unknown"
sdist_file="$(ls "$cache/sdist"/llama_cpp_python-"$version".tar.gz 2>/dev/null || true)"
if [[ -n "$sdist_file" ]] && command -v git >/dev/null; then
  gtmp="$(mktemp -d)"
  if tar -xzf "$sdist_file" -C "$gtmp" --wildcards "llama_cpp_python-$version/.git/*" 2>/dev/null; then
    vendored="$(git -C "$gtmp/llama_cpp_python-$version" ls-tree HEAD vendor/llama.cpp 2>/dev/null | awk '{print $3}')"
  fi
  rm -rf "$gtmp"
fi
{
  echo "llama.cpp $version (llama-cpp-python sdist), vendored llama.cpp commit ${vendored:-unknown}, variant $variant"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
  echo "cpu AMX flags: ${amx_flags:-none}"
  echo "AMX tile state for a process: $amx_perm"
  echo "AMX path compiled into ggml: $amx_built"
  echo "compiler: $(${cxx:-c++} --version | head -n 1)"
} >"$build/bin/build-info.txt"
cat "$build/bin/build-info.txt" >&2
echo "$version $compilers" >"$stamp"
echo "[build-llamacpp] built $bin" >&2
echo "$bin"
