#!/usr/bin/env bash
# What GenAI's default taps cost a real EAGLE-3 head: τ in OpenVINO GenAI 2026.4.1 (CPU, fp32 greedy, k=3, bench's
# built-in prompts) with the head converted by `convert --to openvino` (rt_info hidden_layers_list = its ids - 1) against
# the same IR with GenAI's own default {2, N/2, N-3} (what an IR that states no layers gets), and our runner beside
# both (--compare). docs/benchmarks.md records the numbers.
#
#   OPENVINO_PYTHON=.venv-openvino/bin/python scripts/engines/openvino_taps_cost.sh TARGET HEAD OUTDIR [MAX_NEW_TOKENS]
set -euo pipefail
TARGET=$1 HEAD=$2 OUT=$3 TOKENS=${4:-64}
EC=${EAGLE_CONVERT:-eagle-convert}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# the target exported once, shared by both runs (bench would export it into a temporary folder each time)
[ -f "$OUT/target-ir/openvino_model.xml" ] || HF_HUB_OFFLINE=1 "$OPENVINO_PYTHON" -m optimum.commands.optimum_cli \
  export openvino -m "$(cd "$TARGET" && pwd)" --task text-generation-with-past --weight-format fp32 "$OUT/target-ir"
common=(-t "$TARGET" -d "$HEAD" --engine openvino --compare -k 3 --max-new-tokens "$TOKENS" --ignore-eos --dtype float32
        --engine-arg "target_ir=$OUT/target-ir")
$EC bench "${common[@]}" --report "$OUT/translated.json" | tee "$OUT/translated.txt" || true
$EC bench "${common[@]}" --engine-arg hidden_layers_list=genai-default --no-baseline \
  --report "$OUT/genai-default.json" | tee "$OUT/genai-default.txt" || true   # --compare fails here: exit 3 expected
