#!/usr/bin/env bash
# Sets up everything the trained reference models are built from, under the repository root:
#   .venv-train/                     torch (CPU use) + transformers etc., exact versions from
#                                    scripts/train/requirements.lock (PyPI)
#   .cache/sdist/llama_cpp_python-0.3.36/   llama.cpp's converter (convert_hf_to_gguf.py, gguf-py)
#   .cache/train/kjv-dump.txt        the King James Bible from Debian's bible-kjv-text, printed by
#                                    the `bible` program of bible-kjv (its data file is compressed)
# Idempotent: a second run only checks. Needs PyPI and Debian's archive on the first run; as root
# it uses apt-get download + dpkg -x (no install), so it works without root too if apt's lists
# are current.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$root/scripts/train"
venv="$root/.venv-train"
cache="$root/.cache"
llama_cpp_python_version=0.3.36
py="${PYTHON:-python3}"

if [[ ! -x "$venv/bin/python" ]] || ! "$venv/bin/python" -c 'import torch, transformers' 2>/dev/null; then
  echo "[train-setup] creating $venv"
  "$py" -m venv "$venv"
  # torch's Linux x86_64 wheel on PyPI is the CUDA build (it pulls the nvidia-* wheels, ~3 GB);
  # training runs on the CPU either way. The lock pins every package.
  "$venv/bin/pip" install -q -r "$here/requirements.lock"
fi

sdist_dir="$cache/sdist"
llama_cpp="$sdist_dir/llama_cpp_python-$llama_cpp_python_version/vendor/llama.cpp"
if [[ ! -f "$llama_cpp/convert_hf_to_gguf.py" ]]; then
  mkdir -p "$sdist_dir"
  [[ -f "$sdist_dir/llama_cpp_python-$llama_cpp_python_version.tar.gz" ]] ||
    "$venv/bin/pip" download -q --no-deps --no-binary :all: -d "$sdist_dir" \
      "llama-cpp-python==$llama_cpp_python_version"
  tar -xzf "$sdist_dir/llama_cpp_python-$llama_cpp_python_version.tar.gz" -C "$sdist_dir"
fi

dump="$cache/train/kjv-dump.txt"
if [[ ! -s "$dump" ]]; then
  deb_dir="$cache/train/deb"
  mkdir -p "$deb_dir"
  (
    cd "$deb_dir"
    ls bible-kjv-text_*.deb >/dev/null 2>&1 || apt-get download bible-kjv-text 2>/dev/null ||
      { apt-get update -qq && apt-get download bible-kjv-text; }
    ls bible-kjv_*.deb >/dev/null 2>&1 || apt-get download bible-kjv
    for d in bible-kjv-text_*.deb bible-kjv_*.deb; do dpkg -x "$d" x; done
  )
  # One line per verse (-l: line width), every verse from Genesis 1:1 to Revelation 22:21.
  "$deb_dir/x/usr/bin/bible" -l100000 -p "$deb_dir/x/usr/lib" "Gen1:1-Rev22:21" >"$dump.part"
  mv "$dump.part" "$dump"
  dpkg-deb -f "$deb_dir"/bible-kjv-text_*.deb Package Version >"$cache/train/kjv-source.txt"
fi
echo "[train-setup] venv $venv, converter $llama_cpp, text $dump ($(wc -l <"$dump") lines)"
