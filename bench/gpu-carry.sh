#!/usr/bin/env bash
# bench/gpu-carry.sh out|in — make room for the GPU bundle in the device runner's 64 MiB.
# The runner sends every file git tracks beside the carried paths; the trained reference models
# (tests/data/trained, ~39 MB) are most of the tracked tree and no GPU-machine step reads them.
#   out: drop them from the index (the files stay on disk) and ignore them locally
#        (.git/info/exclude), so they do not travel; nothing may be committed until `in`.
#   in:  put them back in the index and take the local ignore line out again.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
exclude="$(git rev-parse --git-path info/exclude)"
line="/tests/data/trained/"
mark="# the next line: bench/gpu-carry.sh out"
case "${1:-}" in
  out)
    [[ -z "$(git diff --cached --name-only)" ]] || { echo "gpu-carry: the index has staged changes; commit or unstage them first" >&2; exit 1; }
    git rm -r -q --cached tests/data/trained
    mkdir -p "$(dirname "$exclude")"
    grep -qxF "$line" "$exclude" 2>/dev/null || printf '%s\n%s\n' "$mark" "$line" >> "$exclude"
    echo "gpu-carry: tests/data/trained left out of the index; tracked tree now $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes (run 'bash bench/gpu-carry.sh in' after the device run)"
    ;;
  in)
    git reset -q -- tests/data/trained
    if [[ -f "$exclude" ]]; then
      grep -vxF -e "$line" -e "$mark" "$exclude" > "$exclude.tmp" || true
      mv "$exclude.tmp" "$exclude"
    fi
    git diff --quiet -- tests/data/trained || { echo "gpu-carry: tests/data/trained differs from HEAD" >&2; exit 1; }
    echo "gpu-carry: tests/data/trained back in the index"
    ;;
  *) echo "usage: bash bench/gpu-carry.sh out|in" >&2; exit 2 ;;
esac
