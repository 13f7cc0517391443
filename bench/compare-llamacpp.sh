#!/usr/bin/env bash
# Ferry vs llama.cpp on the same GGUF with matched settings; one table of ratios on stdout.
# Builds llama-bench first when needed (bench/build-llamacpp.sh; cuda only when a GPU is present).
#
#   bench/compare-llamacpp.sh -m MODEL.gguf [-m MODEL2.gguf] [-t 2] [-p 512] [-n 128] [-r 5]
#                             [--budgets 16G,12G] [--no-gpu] [--no-cpu] [-o results.md]
#                             [--ferry build/ferry] [--rounds 3]
# See bench/compare_llamacpp.py --help and bench/README.md.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="$root/.venv/bin/python"
[[ -x "$py" ]] || py=python3
exec "$py" "$root/bench/compare_llamacpp.py" "$@"
