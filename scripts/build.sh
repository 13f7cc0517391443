#!/usr/bin/env bash
# scripts/build.sh [release|debug|asan|emu] — configure and build Ferry into build/ (release),
# build-debug/, build-asan/ (AddressSanitizer + UBSan, CUDA on the emulator) or build-emu/ (the
# CUDA backend on the CUDA emulator, tests/cuda_emu: GPU tests without a GPU, fast). Extra args go
# to cmake configure.
#   FERRY_CUDA=AUTO|ON|OFF (default AUTO: built when nvcc is found, runs only where a GPU is)
#   CUDA_ARCH=90           CUDA architectures (default: CI builds one, users get 86;89;90;120)
#   CI=true                warnings as errors
#   FERRY_TARGETS="a b"    build only these targets
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
kind="${1:-release}"; shift || true
case "$kind" in
  release) dir=build; args=(-DCMAKE_BUILD_TYPE=Release) ;;
  debug)   dir=build-debug; args=(-DCMAKE_BUILD_TYPE=Debug) ;;
  # -O1 -g1 (line tables): half the compile time of -O2 -g, and reports still name file:line.
  asan)    dir=build-asan; args=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
                                 -DFERRY_SANITIZE=address,undefined) ;;
  emu)     dir=build-emu; args=(-DCMAKE_BUILD_TYPE=Release) ;;
  *) echo "usage: scripts/build.sh [release|debug|asan|emu] [cmake args...]" >&2; exit 2 ;;
esac
case "$kind" in
  asan|emu) cuda=EMU ;;  # the sanitizer build runs the CUDA code on the emulator too
  *) cuda="${FERRY_CUDA:-AUTO}" ;;
esac
# nvcc ships outside PATH on some installs
if ! command -v nvcc >/dev/null && [[ -x /usr/local/cuda/bin/nvcc ]]; then export PATH=/usr/local/cuda/bin:$PATH; fi
args+=(-DFERRY_CUDA="$cuda")
if [[ -n "${CUDA_ARCH:-}" ]]; then args+=(-DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH")
elif [[ "${CI:-}" == "true" ]]; then args+=(-DCMAKE_CUDA_ARCHITECTURES=90); fi
[[ "${CI:-}" == "true" ]] && args+=(-DFERRY_WERROR=ON)
gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
# ccache, when installed, shares objects between checkouts of the same tree (paths made relative to
# the checkout, so a second worktree's build mostly hits the cache). Optional: not installed by
# install-deps.sh, and a machine without it builds the same way.
if command -v ccache >/dev/null && [[ "${FERRY_CCACHE:-1}" == 1 ]]; then
  export CCACHE_BASEDIR="$root" CCACHE_NOHASHDIR=1
  args+=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
if [[ ! -f "$root/$dir/CMakeCache.txt" ]]; then
  cmake -S "$root" -B "$root/$dir" "${gen[@]}" "${args[@]}" "$@"
else
  cmake "$root/$dir" "${args[@]}" "$@" >/dev/null
fi
targets=(); [[ -n "${FERRY_TARGETS:-}" ]] && targets=(--target ${FERRY_TARGETS})
cmake --build "$root/$dir" -j"$(nproc)" "${targets[@]}"
echo "[build] $kind build in $dir/"
