#!/usr/bin/env bash
# The whole offline suite (what `make test` runs) N times in a row while two busy processes keep both cores loaded;
# stops at the first failure. Usage: bash scripts/stress/stress_suite.sh [N=10]
set -euo pipefail
cd "$(dirname "$0")/../.."
N="${1:-10}"
PY="${PYTHON:-.venv/bin/python}"
busy=()
for _ in 1 2; do "$PY" -c 'while True: pass' & busy+=($!); done
trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
for i in $(seq 1 "$N"); do
  start=$(date +%s)
  if ! "$PY" -m pytest -q -p no:cacheprovider > "/tmp/eagle-stress-suite-$i.log" 2>&1; then
    echo "run $i FAILED ($(( $(date +%s) - start )) s): /tmp/eagle-stress-suite-$i.log"
    tail -30 "/tmp/eagle-stress-suite-$i.log"
    exit 1
  fi
  echo "run $i passed ($(( $(date +%s) - start )) s): $(tail -1 "/tmp/eagle-stress-suite-$i.log")"
done
echo "$N of $N suite runs passed under load"
