#!/usr/bin/env bash
# Fetches test data that is too large (or not ours) to commit, into .cache/ (git-ignored).
# Idempotent: a second run only checks. Needs PyPI (pip download) on the first run.
#
#   .cache/vocab/ggml-vocab-qwen2.gguf{,.inp,.out}   llama.cpp's tokenizer test vocabulary and cases,
#                                                    taken from the llama-cpp-python source
#                                                    distribution of the version installed in .venv
#                                                    (so the cases match the oracle's llama.cpp).
#   FERRY_PYTHON   python whose pip does the download (default: .venv/bin/python, else python3)
#   FERRY_LLAMA_CPP_PYTHON_VERSION   override the version (default: the one installed in that python,
#                                    else 0.3.36, the release these tests were last checked against)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="$root/.cache"
vocab_dir="$cache/vocab"

py="${FERRY_PYTHON:-$root/.venv/bin/python}"
[[ -x "$py" ]] || py=python3

# Vocabularies wanted from the sdist: qwen2 is required; any qwen35 vocab is taken when present.
required=(ggml-vocab-qwen2.gguf ggml-vocab-qwen2.gguf.inp ggml-vocab-qwen2.gguf.out)

have_all=1
for f in "${required[@]}"; do [[ -s "$vocab_dir/$f" ]] || have_all=0; done
if ((have_all)); then
  echo "[fetch-test-data] $vocab_dir: present"
  exit 0
fi

version="${FERRY_LLAMA_CPP_PYTHON_VERSION:-}"
if [[ -z "$version" ]]; then
  version="$("$py" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)"
fi
if [[ -z "$version" ]]; then
  version=0.3.36
  echo "[fetch-test-data] llama-cpp-python is not installed in $py; using the vocabularies of $version"
fi
if ! "$py" -m pip --version >/dev/null 2>&1; then
  echo "[fetch-test-data] $py has no pip: run scripts/install-deps.sh (it makes the .venv) or set FERRY_PYTHON" >&2
  exit 1
fi

sdist_dir="$cache/sdist"
mkdir -p "$sdist_dir" "$vocab_dir"
sdist="$(ls "$sdist_dir"/llama_cpp_python-"$version".tar.gz 2>/dev/null || true)"
if [[ -z "$sdist" ]]; then
  echo "[fetch-test-data] downloading llama-cpp-python==$version source distribution"
  "$py" -m pip download -q --no-deps --no-binary :all: -d "$sdist_dir" "llama-cpp-python==$version"
  sdist="$(ls "$sdist_dir"/llama_cpp_python-"$version".tar.gz)"
fi

# Extract only the vocabularies (the sdist is large; its members sit under one top folder).
tmp="$(mktemp -d "$cache/extract.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
tar -xzf "$sdist" -C "$tmp" --wildcards --no-anchored \
  'vendor/llama.cpp/models/ggml-vocab-qwen2.gguf*' 'vendor/llama.cpp/models/ggml-vocab-qwen35*' 2>/dev/null || true
while IFS= read -r -d '' f; do
  cp -f "$f" "$vocab_dir/$(basename "$f").part"
  mv -f "$vocab_dir/$(basename "$f").part" "$vocab_dir/$(basename "$f")"
done < <(find "$tmp" -type f -path '*vendor/llama.cpp/models/*' -name 'ggml-vocab-qwen*' -print0)
for f in "${required[@]}"; do
  if [[ ! -s "$vocab_dir/$f" ]]; then
    echo "[fetch-test-data] $f not found in $sdist" >&2
    exit 1
  fi
done
echo "[fetch-test-data] vocabularies in $vocab_dir:"
ls -l "$vocab_dir"
