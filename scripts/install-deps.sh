#!/usr/bin/env bash
# Installs everything Ferry needs on Debian 12: system packages (apt) and the Python test tools
# (into the project venv .venv/). Idempotent: a second run only checks.
#   FERRY_SKIP_APT=1     skip apt (e.g. a machine without root)
#   FERRY_SKIP_PY=1      skip the Python venv (tools only needed by oracle tests and benchmarks)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

apt_pkgs=(build-essential cmake ninja-build pkg-config git python3 python3-venv python3-dev
          libtbb-dev liburing-dev libmimalloc-dev libgtest-dev libgmock-dev
          nlohmann-json3-dev libcli11-dev libfmt-dev libpcre2-dev clang-format patchelf
          libcpp-httplib-dev chromium)

if [[ "${FERRY_SKIP_APT:-0}" != 1 ]]; then
  missing=()
  for p in "${apt_pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "[install-deps] apt: ${missing[*]}"
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

if [[ "${FERRY_SKIP_PY:-0}" != 1 ]]; then
  venv="$root/.venv"
  py=python3
  [[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
  # numpy + gguf: writers/dequantizers for tests. llama-cpp-python compiles llama.cpp (CPU) from
  # its source distribution: the oracle for logits, tokenizer and quantization.
  # jinja2: the oracle of the chat-template parity test (tests/chat/test_template_parity.py).
  if ! "$venv/bin/python" -c "import numpy, gguf, jinja2" 2>/dev/null; then
    "$venv/bin/pip" install -q --upgrade pip >/dev/null
    "$venv/bin/pip" install -q "numpy<3" "gguf>=0.17" "jinja2>=3.1"
  fi
  # The official OpenAI client: the `ferry serve` tests talk to the server through it; the web
  # page test drives headless Chromium over the DevTools protocol with websocket-client and
  # measures its screenshot with Pillow.
  if ! "$venv/bin/python" -c "import openai, websocket, PIL" 2>/dev/null; then
    "$venv/bin/pip" install -q "openai>=1.40" "websocket-client>=1.6" "pillow>=10"
  fi
  # Pinned: Ferry's CPU kernels add in the orders of this version's ggml (kernels/cpu/dot_ref.cpp),
  # and the oracle tests hold quantized logits to it bit for bit — for the AVX2 build below. A build
  # with other CPU flags (e.g. a native AVX-512 one, which pip's wheel cache may hold from another
  # project: the cache is keyed by the source, not by CMAKE_ARGS) adds in other orders, and the
  # oracle tests would fail bit-identity with no hint why. So the installed library's compiled
  # features are checked (scripts/check_oracle_build.py), and a mismatched one is rebuilt without
  # pip's wheel cache.
  llama_version=0.3.36
  llama_flags="-DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF"
  check="$root/scripts/check_oracle_build.py"
  install_oracle() {  # $@: extra pip flags
    CMAKE_ARGS="$llama_flags" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
      "$venv/bin/pip" install -q "$@" "llama-cpp-python==$llama_version"
  }
  if ! "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('llama_cpp_python') != '$llama_version')" 2>/dev/null; then
    echo "[install-deps] building llama-cpp-python $llama_version (compiles llama.cpp, several minutes)"
    install_oracle
  fi
  if ! why="$("$venv/bin/python" "$check" 2>&1)"; then
    echo "[install-deps] the installed llama-cpp-python is not the oracle build: $why"
    echo "[install-deps] rebuilding it with the oracle's flags, without pip's wheel cache (several minutes)"
    install_oracle --no-cache-dir --force-reinstall --no-deps
  fi
  if ! why="$("$venv/bin/python" "$check" 2>&1)"; then
    echo "[install-deps] error: llama-cpp-python $llama_version in $venv is not the oracle build the tests need: $why" >&2
    echo "[install-deps] remove it ($venv/bin/pip uninstall llama-cpp-python) and run this script again" >&2
    exit 1
  fi
fi
echo "[install-deps] ok"
