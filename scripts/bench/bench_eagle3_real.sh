#!/usr/bin/env bash
# Issue 17's benches: the trained EAGLE-3 head (converted --to vllm) beside the EAGLE-1 head (converted --to
# vllm-v0), greedy fp32 on the 20 held-out prompts; k = 3 with plain decoding in the same run (speedup, lossless
# check), the other k without. Two streams of one thread each run side by side (the machine has 2 cores).
#   PYTHON=.venv/bin/python bash scripts/bench/bench_eagle3_real.sh TARGET EAGLE3_HEAD EAGLE1_HEAD OUT_DIR
# Reports: OUT_DIR/{eagle3,eagle1}-k*.json; summary: python scripts/bench/summarize_bench.py OUT_DIR/*.json
set -euo pipefail
TARGET=${1:?target folder}; E3=${2:?EAGLE-3 head}; E1=${3:?EAGLE-1 head}; OUT=${4:?output folder}
PY=${PYTHON:-python}; N=${MAX_NEW_TOKENS:-128}; PROMPTS=${PROMPTS:-scripts/real/data/real_eval_prompts.jsonl}
mkdir -p "$OUT"
$PY -m eagle_convert convert "$E3" --target "$TARGET" -o "$OUT/eagle3-vllm" --to vllm --force -q
$PY -m eagle_convert convert "$E1" --target "$TARGET" -o "$OUT/eagle1-vllm-v0" --to vllm-v0 --force -q
bench() {  # NAME DRAFT K [extra bench options]
  local name=$1 draft=$2 k=$3; shift 3
  $PY -m eagle_convert bench --target "$TARGET" --draft "$draft" -k "$k" --max-new-tokens "$N" --prompts "$PROMPTS" \
    --dtype float32 --threads 1 -q --report "$OUT/$name-k$k.json" "$@" > "$OUT/$name-k$k.txt"
}
( bench eagle3 "$OUT/eagle3-vllm" 3; bench eagle3 "$OUT/eagle3-vllm" 1 --no-baseline
  bench eagle3 "$OUT/eagle3-vllm" 2 --no-baseline ) &
a=$!
( bench eagle1 "$OUT/eagle1-vllm-v0" 3; bench eagle3 "$OUT/eagle3-vllm" 4 --no-baseline
  bench eagle3 "$OUT/eagle3-vllm" 5 --no-baseline ) &
b=$!
wait $a; wait $b
