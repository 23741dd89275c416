#!/usr/bin/env bash
# The bench runner's device check, prepared to run in one go whenever a GPU is lent (issue 24, item 4):
#   1. the environment: GPU, torch / CUDA / cuDNN versions, TF32 switches, SDPA backends (runner/precision.py);
#   2. tests/runner/test_runner_device.py on the device in fp32 (TF32 pinned off: golden logits, lossless chain and trees,
#      a long YaRN prompt in prefill chunks against the CPU) and in bf16; then the CPU reference files (golden,
#      lossless, trees, RoPE, prefill, sliding windows) as they stand;
#   3. long plain prompts through `eagle-convert bench` on a tiny EAGLE-3 pair built here, in fp32 (the lossless
#      check must hold exactly) and bf16, each report's environment and tau printed.
# Without a GPU, or with --dry-run, the same steps run on the CPU at small sizes (CI runs it so; under a minute).
# Usage: scripts/gpu_check.sh [--dry-run]    (PYTHON=... to choose the interpreter; OUT=... keeps the reports)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"
dry=0
[[ ${1:-} == --dry-run ]] && dry=1
if [[ $dry == 0 ]] && $PY -c 'import sys, torch; sys.exit(not torch.cuda.is_available())'; then
  device=cuda; dtypes="float32 bfloat16"; lengths="1000 2000 3900"; new_tokens=64
else
  dry=1; device=cpu; dtypes="float32"; lengths="300"; new_tokens=8
fi
work=${OUT:-$(mktemp -d)}
mkdir -p "$work"
echo "== gpu_check: device=$device dry_run=$dry reports in $work"
$PY -c "import json, sys; from eagle_convert.runner.precision import runtime_environment as e; print(json.dumps(e('$device')))"

echo "== 2. runner tests on $device"
for dtype in $dtypes; do
  EAGLE_CONVERT_TEST_DEVICE=$device EAGLE_CONVERT_TEST_DTYPE=$dtype $PY -m pytest -q -s -p no:cacheprovider \
    tests/runner/test_runner_device.py
done
if [[ $dry == 0 ]]; then
  $PY -m pytest -q -p no:cacheprovider tests/runner/test_runner_golden.py tests/runner/test_tree_golden.py tests/runner/test_speculate.py \
    tests/runner/test_tree_speculate.py tests/runner/test_runner_rope.py tests/runner/test_runner_prefill.py tests/runner/test_runner_sliding.py
fi

echo "== 3. long prompts through bench on $device"
$PY - "$work" $lengths <<'EOF'
import json, sys
from pathlib import Path
from eagle_convert.testing.tiny import TinyConfig, make_eagle3_head, make_target
work, lengths = Path(sys.argv[1]), [int(n) for n in sys.argv[2:]]
cfg = TinyConfig(num_hidden_layers=4)
tensors = make_target(work / "target", cfg)
make_eagle3_head(work / "draft", cfg, tensors, aux_layer_ids=[0, 1, 2])
with open(work / "prompts.jsonl", "w") as f:  # plain long prompts: a fixed walk through the vocabulary
    for n in lengths:
        f.write(json.dumps({"id": f"{n}-tokens", "prompt_ids": [3 + (i * 7 + i // 13) % 250 for i in range(n)]}) + "\n")
EOF
for dtype in $dtypes; do
  $PY -m eagle_convert bench --target "$work/target" --draft "$work/draft" --prompts "$work/prompts.jsonl" \
    --device "$device" --dtype "$dtype" -k 3 --max-new-tokens "$new_tokens" --ignore-eos --json \
    > "$work/bench-$dtype.json"
  $PY - "$work/bench-$dtype.json" <<'EOF'
import json, sys
report = json.load(open(sys.argv[1]))
overall = report["overall"]
print(json.dumps({"dtype": report["settings"]["dtype"], "tau": overall["acceptance"]["mean_acceptance_length"],
                  "tokens_per_s": overall["tokens_per_s"], "speedup": overall["speedup"],
                  "lossless": report["lossless"], "prompt_tokens": [p["prompt_tokens"] for p in report["prompts"]],
                  "environment": report["environment"]}))
EOF
done
echo "== gpu_check: passed"
