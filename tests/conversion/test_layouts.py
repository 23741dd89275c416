"""Every output layout (issue 4): round trips between every allowed pair, exact key lists and configs, refusals,
EAGLE-3 checks, and the fc-bias fold."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.convert import load_out
from support.golden_sets import golden

import eagle_convert
from eagle_convert import errors
from eagle_convert.layouts import LAYOUTS, Layout, output_layouts
from eagle_convert.layouts.registry import served_as_stored
from eagle_convert.layouts.variant_table import variant_markdown_table
from eagle_convert.testing.tiny import TinyConfig

LAYER = [f"layers.0.self_attn.{p}_proj.weight" for p in "qkvo"] + \
        [f"layers.0.mlp.{p}_proj.weight" for p in ("gate", "up", "down")] + ["layers.0.post_attention_layernorm.weight"]
EAGLE3_LAYER = LAYER + ["layers.0.input_layernorm.weight", "layers.0.hidden_norm.weight"]

# The exact tensor names each output layout holds, for a head with fc.bias and embed_tokens (EAGLE-1) and for an
# EAGLE-3 head without embed_tokens.
EXPECTED_KEYS = {
    ("eagle1", "vllm-v0"): set(LAYER) | {"fc.weight", "fc.bias", "embed_tokens.weight", "lm_head.weight"},
    ("eagle1", "vllm"): set(LAYER) | {"fc.weight", "embed_tokens.weight"},  # --fc-bias fold
    ("eagle1", "sglang"): set(LAYER) | {"fc.weight", "fc.bias", "embed_tokens.weight"},
    ("eagle3", "vllm"): set(EAGLE3_LAYER) | {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"},
    ("eagle3", "speculators"): set(EAGLE3_LAYER) | {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"},
    ("eagle3", "sglang"): {n.replace("layers.0.", "midlayer.") for n in EAGLE3_LAYER}
    | {"fc.weight", "norm.weight", "lm_head.weight", "d2t", "t2d"},
}
ALLOWED = {"eagle1": ["vllm-v0", "vllm", "sglang"], "eagle3": ["vllm", "speculators", "sglang"]}
REFUSED = {"eagle1": ["speculators"], "eagle3": ["vllm-v0"]}


class _NewLayout(Layout):
    """A layout registered only for the test: every list of layouts must pick it up from the registry."""

    name = "new-layout"
    kinds = ("eagle3",)
    served_by = ("vllm",)
    output_order = 15


def test_registry_is_the_single_list(monkeypatch):
    monkeypatch.setitem(LAYOUTS, _NewLayout.name, _NewLayout())
    assert "new-layout" in output_layouts()
    # what engines/prepare.py serves as is (the DFlash layouts: vLLM `method: dflash`)
    assert served_as_stored("vllm") == ["vllm", "speculators", "dflash", "speculators-dflash", "new-layout"]
    header = variant_markdown_table().splitlines()[0]  # the README variant table's columns, in output_order
    assert header == ("| variant | `--to vllm` | `--to new-layout` | `--to speculators` | `--to sglang` | `--to gguf` "
                      "| `--to openvino` |")
    monkeypatch.delitem(LAYOUTS, _NewLayout.name)
    assert "new-layout" not in variant_markdown_table()  # negative control: the column came from the registry


def _layout_name_lists(tree: ast.AST) -> list[int]:
    """Line numbers of tuple/list/set literals of two or more layout names."""
    return [node.lineno for node in ast.walk(tree) if isinstance(node, (ast.Tuple, ast.List, ast.Set))
            and len(node.elts) > 1 and all(isinstance(e, ast.Constant) and e.value in LAYOUTS for e in node.elts)]


def test_no_hand_typed_list_of_layouts_in_the_package():
    package = Path(eagle_convert.__file__).parent
    found = {str(path.relative_to(package)): lines for path in sorted(package.rglob("*.py"))
             if (lines := _layout_name_lists(ast.parse(path.read_text())))}
    assert found == {}
    assert _layout_name_lists(ast.parse('X = ("vllm", "speculators")')) == [1]  # negative control: one is found


def convert_to(draft, target, out, to, **kw):
    kw.setdefault("fc_bias", "fold")
    return eagle_convert.convert(str(draft), str(target), out, to=to, **kw)


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_round_trips_between_every_allowed_pair(kind, pair, tmp_path):
    cfg = TinyConfig(num_hidden_layers=8)
    target, draft, _ = pair(cfg=cfg, kind=kind)
    canonical = {k.replace("midlayer.", "layers.0."): v for k, v in
                 (torch.load(draft / "pytorch_model.bin", weights_only=True) if kind == "eagle1"
                  else load_file(draft / "model.safetensors")).items()}
    firsts = {}
    for to in ALLOWED[kind]:
        out = tmp_path / f"first-{to}"
        convert_to(draft, target, out, to)
        cfg_out, tensors = load_out(out)
        assert set(tensors) == EXPECTED_KEYS[(kind, to)], to
        firsts[to] = out
    for src, folder in firsts.items():  # every output is a valid input, and converts on to every other layout
        for to in ALLOWED[kind]:
            if kind == "eagle1" and src == "vllm" and to != "vllm":
                continue  # the fc bias was folded into the embedding: the head no longer has one to restore
            out = tmp_path / f"{src}-to-{to}"
            convert_to(folder, target, out, to)
            _, tensors = load_out(out)
            assert set(tensors) == EXPECTED_KEYS[(kind, to)], (src, to)
            for name, value in tensors.items():
                role = name.replace("midlayer.", "layers.0.")
                folded = kind == "eagle1" and "vllm" in (src, to) and role == "embed_tokens.weight"
                if role in canonical and not folded:  # a folded embedding is checked by the fold tests
                    assert torch.equal(value, canonical[role].to(value.dtype)), (src, to, name)


@pytest.mark.parametrize("kind", ["eagle1", "eagle3"])
def test_refused_pairs_write_nothing(kind, pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind=kind)
    for to in REFUSED[kind]:
        with pytest.raises(errors.UnsupportedConversionError) as info:
            convert_to(draft, target, tmp_path / to, to)
        assert "EAGLE" in info.value.message and info.value.hint
        assert not (tmp_path / to).exists()


def test_vllm_v1_eagle1_config(pair, tmp_path):
    target, draft, _ = pair(fc_bias=False)
    result = convert_to(draft, target, tmp_path / "out", "vllm")
    cfg = json.loads((tmp_path / "out" / "config.json").read_text())
    assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama"
    assert "bias" not in cfg and cfg["attention_bias"] is False
    assert cfg["rope_theta"] == 10000.0 and cfg["max_position_embeddings"] == 4096
    assert json.loads(result.plan.serve_command.split("--speculative-config ")[1].strip("'"))["method"] == "eagle"


def test_fc_bias_to_v1_default_refuses_naming_the_alternatives(pair, tmp_path):
    target, draft, _ = pair(fc_bias=True)
    with pytest.raises(errors.UnsupportedConversionError) as info:
        eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm")
    for option in ('fc_bias="fold"', 'fc_bias="drop"', 'to="vllm-v0"'):  # spelled for a Python caller
        assert option in str(info.value)
    assert not (tmp_path / "out").exists()
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm", fc_bias="drop")
    assert result.plan.warnings and "lossy" in dict(result.plan.dropped)["fc.bias"]


def test_fold_is_exact_on_the_golden_llama2_head(tmp_path):
    root = golden("eagle1-llama2")
    result = eagle_convert.convert(str(root / "draft"), str(root / "target"), tmp_path / "out", to="vllm",
                                   fc_bias="fold", dtype="float32")
    assert result.fold.max_rel_error <= 1e-3
    # Independently: the folded fc over every real embedding row equals the original fc with its bias.
    raw = torch.load(root / "draft" / "pytorch_model.bin", weights_only=True)
    draft = {k: v.to(torch.float32) for k, v in raw.items()}
    _, out = load_out(tmp_path / "out")
    h = draft["fc.weight"].shape[0]
    feature = torch.randn(draft["embed_tokens.weight"].shape[0], h, generator=torch.Generator().manual_seed(0))
    original = torch.cat([draft["embed_tokens.weight"], feature], 1) @ draft["fc.weight"].T + draft["fc.bias"]
    folded = torch.cat([out["embed_tokens.weight"], feature], 1) @ out["fc.weight"].T
    rel = ((folded - original).abs().amax(1) / original.abs().amax(1)).max()
    assert rel <= 1e-3 and "fc.bias" not in out


def test_golden_eagle3_to_every_layout(tmp_path):
    root = golden("eagle3-llama31")
    src = load_file(root / "draft" / "model.safetensors")
    for to in ALLOWED["eagle3"]:
        out = tmp_path / to
        eagle_convert.convert(str(root / "draft"), str(root / "target"), out, to=to, dtype="bfloat16")
        cfg, tensors = load_out(out)
        inner = cfg.get("transformer_layer_config", cfg)
        top = cfg
        assert top["draft_vocab_size"] == 128 and top["target_hidden_size"] == 64
        if to == "sglang":  # SGLang reads them from eagle_config only, counting layer outputs (ours - 1)
            assert top["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 3, 4]
        else:
            assert top["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]
        assert top["norm_before_residual"] is False
        # never the target's llama3 scaling
        assert inner["rope_theta"] == 500000.0 and inner.get("rope_scaling") is None
        assert inner["max_position_embeddings"] == 131072 and "bias" not in inner
        assert torch.equal(tensors["d2t"], src["d2t"]) and tensors["d2t"].dtype == torch.int64
        assert torch.equal(tensors["t2d"], src["t2d"])
        mid = "midlayer." if to == "sglang" else "layers.0."
        assert torch.equal(tensors[mid + "self_attn.q_proj.weight"], src["midlayer.self_attn.q_proj.weight"])
    spec_cfg = json.loads((tmp_path / "speculators" / "config.json").read_text())
    assert spec_cfg["speculators_model_type"] == "eagle3" and "model_type" not in spec_cfg
    sc = spec_cfg["speculators_config"]
    assert sc["algorithm"] == "eagle3" and sc["default_proposal_method"] == "greedy"
    assert sc["proposal_methods"][0]["speculative_tokens"] == 3
    assert sc["verifier"]["name_or_path"] == str((root / "target").resolve())  # absolute, links resolved
    assert sc["verifier"]["architectures"] == ["LlamaForCausalLM"]
    assert json.loads((tmp_path / "sglang" / "config.json").read_text())["architectures"] == ["LlamaForCausalLMEagle3"]


def rewrite(draft, **changes):
    t = load_file(draft / "model.safetensors")
    for k, v in changes.items():
        t[k.replace("__", ".")] = v
    save_file(t, draft / "model.safetensors")
    return t


@pytest.mark.parametrize("damage,match", [
    (lambda t: {"d2t": t["d2t"].flip(0)}, "strictly increasing|outside"),
    (lambda t: {"d2t": t["d2t"] + 10_000}, "outside the target vocabulary"),
    (lambda t: {"t2d": torch.ones_like(t["t2d"])}, "t2d does not mark"),
])
def test_eagle3_vocab_map_checks(damage, match, pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3")
    t = load_file(draft / "model.safetensors")
    t.update(damage(t))
    save_file(t, draft / "model.safetensors")
    with pytest.raises(errors.ShapeMismatchError, match=match):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm")
    assert not (tmp_path / "out").exists()


def test_eagle3_missing_d2t_is_refused(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3")
    t = load_file(draft / "model.safetensors")
    del t["d2t"]
    save_file(t, draft / "model.safetensors")
    with pytest.raises(errors.LayoutError, match="no d2t"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm")


def test_eagle3_invalid_aux_layers_and_wrong_width(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3", aux_layer_ids=[2, 4, 9])
    with pytest.raises(errors.ShapeMismatchError, match="not three distinct, increasing layers"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm")
    cfg = json.loads((target / "config.json").read_text())
    cfg["hidden_size"] = 32
    (target / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(errors.ShapeMismatchError, match="3 x target hidden"):
        eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm")


def test_eagle3_short_target_needs_explicit_aux_ids_and_wrong_layer_count_is_corrected(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3")
    cfg = json.loads((draft / "config.json").read_text())
    cfg["num_hidden_layers"] = 32  # copied from the target by some exporters
    (draft / "config.json").write_text(json.dumps(cfg))
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm")
    assert result.plan.config["num_hidden_layers"] == 1
    assert any("num_hidden_layers=32" in n for n in result.plan.notes)
    assert result.plan.config["eagle_aux_hidden_state_layer_ids"] == [2, 4, 5]


def test_eagle3_layers0_naming_and_bin_input(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3", prefix="layers.0.", draft_fmt="bin",
                            embed=True)
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="speculators")
    assert result.detected_layout == "vllm"
    _, tensors = load_out(tmp_path / "out")
    assert "embed_tokens.weight" in tensors and "layers.0.hidden_norm.weight" in tensors


def test_every_conversion_prints_its_serve_command(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3")
    result = eagle_convert.convert(str(draft), str(target), tmp_path / "o", to="vllm", dry_run=True)
    cmd = result.plan.serve_command
    assert cmd.startswith(f"vllm serve {target} --speculative-config ")
    assert json.loads(cmd.split("--speculative-config ")[1].strip("'")) == {
        "method": "eagle3", "model": str(tmp_path / "o"), "num_speculative_tokens": 3}


def test_eagle3_aux_ids_must_be_distinct_and_increasing(pair, tmp_path):
    # A 6-layer target makes the default (2, L//2, L-3) = (2, 3, 3): engines would collapse the duplicate.
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=6), kind="eagle3")
    with pytest.raises(errors.ShapeMismatchError, match="distinct, increasing") as info:
        eagle_convert.convert(str(draft), str(target), tmp_path / "out", to="vllm")
    assert "eagle_aux_hidden_state_layer_ids" in info.value.hint


def test_eagle3_full_draft_vocab_writes_no_d2t_for_vllm(pair, tmp_path):
    target, draft, _ = pair(cfg=TinyConfig(num_hidden_layers=8), kind="eagle3", draft_vocab=256)
    for to in ("vllm", "speculators", "sglang"):
        result = eagle_convert.convert(str(draft), str(target), tmp_path / to, to=to)
        _, tensors = load_out(tmp_path / to)
        assert ("d2t" in tensors) is (to == "sglang"), to  # vLLM refuses an (identity) d2t with a full vocab
        if to != "sglang":
            assert "identity" in dict(result.plan.dropped)["d2t"]


def test_vllm_v0_says_where_a_user_looks_that_current_vllm_refuses_it(pair, tmp_path):
    """The default layout is refused by vLLM >= 0.10: `--to`'s help, `layouts` and the conversion itself say so and
    name the layouts current vLLM loads; a conversion to another layout says nothing of it (negative control)."""
    import subprocess
    import sys

    def cli(*args):
        done = subprocess.run([sys.executable, "-m", "eagle_convert", *map(str, args)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done

    def said(text):
        return "vLLM >= 0.10 refuses" in " ".join(text.split())

    target, draft, _ = pair(fc_bias=False)
    assert said(cli("convert", "--help").stdout)
    listed = cli("layouts").stdout.splitlines()
    row = next(i for i, line in enumerate(listed) if line.startswith("vllm-v0 "))
    assert said(listed[row + 1]) and "--to vllm" in listed[row + 1] and "--to speculators" in listed[row + 1]
    human = cli("convert", draft, "-t", target, "-o", tmp_path / "v0", "-q")  # the default layout
    stderr = " ".join(human.stderr.split())  # paragraphs are wrapped
    assert stderr.count("warning: vLLM >= 0.10 refuses the vllm-v0 layout") == 1 and not said(human.stdout)
    assert "--to vllm, or --to speculators" in stderr
    as_json = json.loads(cli("convert", draft, "-t", target, "-o", tmp_path / "v0-json", "--json").stdout)
    assert any(said(w) for w in as_json["warnings"])
    other = cli("convert", draft, "-t", target, "-o", tmp_path / "v1", "--to", "vllm", "--json")
    assert json.loads(other.stdout)["warnings"] == [] and not said(other.stderr)
