#!/usr/bin/env bash
# N CLI conversions of a tiny pair while two busy processes keep both cores loaded; every exit status must be 0.
# The race it hunts: a background thread (read-ahead, pre-hash, hash) still inside native code when the interpreter
# shuts down aborts the process (exit 134) after a complete, verified write. See io/background.py.
#
# Usage: bash scripts/stress/stress_convert.sh [N=500] [WORKDIR]   (uses .venv; prints a histogram of exit statuses)
set -euo pipefail
cd "$(dirname "$0")/../.."
N="${1:-500}"
WORK="${2:-$(mktemp -d -t eagle-stress-XXXXXX)}"
PY="${PYTHON:-.venv/bin/python}"
CLI="${EAGLE_CONVERT:-.venv/bin/eagle-convert}"
mkdir -p "$WORK"
"$PY" - "$WORK" <<'PYEOF'
import sys
from pathlib import Path
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target
root = Path(sys.argv[1])
cfg = TinyConfig(hidden_size=64, num_hidden_layers=2, vocab_size=512)
target = make_target(root / "target", cfg)
make_eagle1_head(root / "draft", cfg, target, fc_bias=True)
PYEOF
busy=()
for _ in 1 2; do "$PY" -c 'while True: pass' & busy+=($!); done
trap 'kill "${busy[@]}" 2>/dev/null || true' EXIT
declare -A statuses=()
failures=0
start=$(date +%s)
for i in $(seq 1 "$N"); do
  status=0
  "$CLI" convert "$WORK/draft" --target "$WORK/target" -o "$WORK/out" --to vllm-v0 --force --quiet \
    > "$WORK/last.out" 2> "$WORK/last.err" || status=$?
  statuses[$status]=$(( ${statuses[$status]:-0} + 1 ))
  if [ "$status" -ne 0 ]; then
    failures=$((failures + 1))
    echo "run $i: exit $status" >&2
    tail -5 "$WORK/last.err" >&2
  fi
  if [ $((i % 50)) -eq 0 ]; then echo "$i runs, $failures failed ($(( $(date +%s) - start )) s)"; fi
done
echo "exit statuses over $N conversions under load: $(for s in "${!statuses[@]}"; do printf '%s:%s ' "$s" "${statuses[$s]}"; done)"
[ "$failures" -eq 0 ]
