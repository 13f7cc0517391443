#!/usr/bin/env bash
# run_oracle.sh PYTHON SCRIPT: runs one oracle test; 77 (ctest "skipped") when the venv is absent.
py="$1"; shift
if [[ ! -x "$py" ]]; then
  echo "SKIPPED: project venv missing ($py); run scripts/install-deps.sh"
  exit 77
fi
mkdir -p "$FERRY_SCRATCH"
exec "$py" "$@"
