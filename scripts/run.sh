#!/usr/bin/env bash
# scripts/run.sh [ferry run options] — install what Ferry needs, build it, and run the main job:
# `ferry run` generating text. Without -m it runs the project's trained reference model
# (tests/data/trained/kjv-qwen35moe-q8_0.gguf: a tiny qwen35moe trained on the King James Bible, see
# its card), with a KJV prompt unless -p/-f is given.
#   bash scripts/run.sh                                  # the trained reference model
#   bash scripts/run.sh -m Qwen3-30B-A3B-Q4_K_M.gguf -p "Why is the sky blue?" -n 256
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
FERRY_SKIP_PY=1 bash scripts/install-deps.sh   # the Python tools are only for tests
bash scripts/build.sh release >/dev/null
has_model=0 has_prompt=0
for a in "$@"; do
  case "$a" in -m|--model|-m=*|--model=*) has_model=1 ;; -p|--prompt|-f|--file|-p=*|--prompt=*|-f=*|--file=*) has_prompt=1 ;; esac
done
defaults=()
if ((!has_model)); then
  defaults+=(-m "$root/tests/data/trained/kjv-qwen35moe-q8_0.gguf")
  ((has_prompt)) || defaults+=(-p "And the LORD said unto Moses,")
fi
exec "$root/build/ferry" run "${defaults[@]}" "$@"
