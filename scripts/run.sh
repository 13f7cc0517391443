#!/usr/bin/env bash
# scripts/run.sh [ferry run options] — install what Ferry needs, build it, and run the main job:
# `ferry run` generating text. Without -m it uses a built-in synthetic model (made once, cached).
#   bash scripts/run.sh                                  # synthetic model, default prompt
#   bash scripts/run.sh -m Qwen3-30B-A3B-Q4_K_M.gguf -p "Why is the sky blue?" -n 256
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
FERRY_SKIP_PY=1 bash scripts/install-deps.sh   # the Python tools are only for tests
bash scripts/build.sh release >/dev/null
exec "$root/build/ferry" run "$@"
