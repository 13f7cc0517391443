#!/usr/bin/env bash
# run_server_test.sh PYTHON SCRIPT: one `ferry serve` test with the project venv. A missing venv
# (or its openai package) fails the test: scripts/install-deps.sh installs both.
py="$1"; shift
if [[ ! -x "$py" ]]; then
  echo "FAILED: project venv missing ($py); run scripts/install-deps.sh"
  exit 1
fi
mkdir -p "$FERRY_SCRATCH"
exec "$py" "$@"
