"""Every EAGLE-3 variant: detected from its tensors, run by the bench runner exactly as its definition says (checked
against a plain-torch implementation written here from that definition), written to every layout that can express
it with the same numbers, or refused by name."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from support.convert import flat, run_cli
from support.variant_heads import TARGET, VARIANTS, WIDE_TARGET, make_variant_head
from support.variants import LAYOUTS, edit_config, load, runner_head

import eagle_convert
from eagle_convert import errors
from eagle_convert.runner.trees.shapes import TreeOptions
from eagle_convert.testing.tiny import make_target

REFUSED = {("norm_before_residual", "sglang"): "norm_before_residual", ("qwen3", "sglang"): "q_norm/k_norm",
           ("fc_bias", "vllm"): "without a bias", ("fc_bias", "speculators"): "without a bias",
           ("fc_bias", "sglang"): "o_proj a bias"}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Both targets and every variant head, built once for the module."""
    root = tmp_path_factory.mktemp("variants")
    targets = {"narrow": make_target(root / "target", TARGET), "wide": make_target(root / "target-wide", WIDE_TARGET)}
    heads = {name: make_variant_head(root / name, **kw) for name, kw in VARIANTS.items()}
    return root, targets, heads


def target_of(name):
    return "target-wide" if VARIANTS[name].get("wide") else "target"


# ---- the variant's definition, in plain torch (float64), independent of the runner ---------------------------------

def rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def rotate(x, positions, theta):
    d = x.shape[-1]
    inv = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    angle = positions[:, None].double() * inv[None, :]
    cos, sin = torch.cat([angle.cos()] * 2, -1), torch.cat([angle.sin()] * 2, -1)
    return x * cos + torch.cat([-x[..., d // 2:], x[..., :d // 2]], -1) * sin


def attention(t, p, x, spec):
    n, kv, d = spec.num_attention_heads, spec.num_key_value_heads, spec.head_dim
    rows = x.shape[0]
    q = (x @ t[p + "q_proj.weight"].T).view(rows, n, d).transpose(0, 1)
    k = (x @ t[p + "k_proj.weight"].T).view(rows, kv, d).transpose(0, 1)
    v = (x @ t[p + "v_proj.weight"].T).view(rows, kv, d).transpose(0, 1)
    if spec.qk_norm:  # Qwen3: per-head RMSNorm of q and k before RoPE
        q, k = rms(q, t[p + "q_norm.weight"], spec.rms_norm_eps), rms(k, t[p + "k_norm.weight"], spec.rms_norm_eps)
    pos = torch.arange(rows)
    q, k = rotate(q, pos, spec.rope_theta), rotate(k, pos, spec.rope_theta)
    k, v = k.repeat_interleave(n // kv, 0), v.repeat_interleave(n // kv, 0)
    scores = (q @ k.transpose(1, 2)) / math.sqrt(d)
    scores = scores.masked_fill(torch.ones(rows, rows, dtype=torch.bool).triu(1), float("-inf"))
    return (scores.softmax(-1) @ v).transpose(0, 1).reshape(rows, n * d) @ t[p + "o_proj.weight"].T


def mlp(t, p, x):
    gated = torch.nn.functional.silu(x @ t[p + "gate_proj.weight"].T) * (x @ t[p + "up_proj.weight"].T)
    return gated @ t[p + "down_proj.weight"].T


def reference_fc(t, spec, features):
    """vLLM's combine_hidden_states: one norm over the concatenation (norm_before_fc), one per aux state (fc_norm)."""
    if spec.norm_before_fc:
        features = rms(features, t["input_norm.weight"], spec.rms_norm_eps)
    if spec.fc_norm:
        chunks = features.chunk(spec.num_aux_states, -1)
        features = torch.cat([rms(c, t[f"fc_norm.{i}.weight"], spec.rms_norm_eps) for i, c in enumerate(chunks)], -1)
    return features @ t["fc.weight"].T + (t["fc.bias"] if spec.fc_bias else 0)


def reference_layers(t, spec, tokens, g, embed, lm_head):
    """Rows of g (already through fc) and their tokens -> (logits, fed-back hidden), full causal attention."""
    eps = spec.rms_norm_eps
    g_normed = rms(g, t["layers.0.hidden_norm.weight"], eps)
    residual = g_normed if spec.norm_before_residual else g
    x = torch.cat([rms(embed[tokens], t["layers.0.input_layernorm.weight"], eps), g_normed], -1)
    residual = residual + attention(t, "layers.0.self_attn.", x, spec)
    h = mlp(t, "layers.0.mlp.", rms(residual, t["layers.0.post_attention_layernorm.weight"], eps))
    for i in range(1, spec.num_layers):
        residual = h + residual
        normed = rms(residual, t[f"layers.{i}.input_layernorm.weight"], eps)
        residual = residual + attention(t, f"layers.{i}.self_attn.", normed, spec)
        h = mlp(t, f"layers.{i}.mlp.", rms(residual, t[f"layers.{i}.post_attention_layernorm.weight"], eps))
    out = h + residual
    normed = rms(out, t["norm.weight"], eps)
    return normed @ lm_head.T, (normed if spec.norm_output else out)


def feature_width(spec):
    return spec.num_aux_states * spec.target_hidden_size if spec.use_aux_hidden_state else spec.hidden_size


def two_steps(runner, spec, seed=0):
    """A target pass over 5 rows, then one fed-back row: (logits, hidden) of each, in float64."""
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, spec.vocab_size, (1, 6), generator=g)
    features = torch.randn(1, 5, feature_width(spec), generator=g)
    first = runner(tokens[:, :5], features, range(0, 5), from_target=True)
    second = runner(tokens[:, 5:], first.hidden[:, -1:], range(5, 6), from_target=False)
    return tokens, features, first, second


# ---- detection ------------------------------------------------------------------------------------------------------

EXPECTED = {  # variant -> spec fields that must differ from the plain EAGLE-3 head
    "base": {},
    "norm_before_fc": {"norm_before_fc": True},
    "norm_before_fc_nested": {"norm_before_fc": True},
    "eagle31": {"fc_norm": True, "norm_output": True},
    # SpecForge's norm_output: true = logits through norm, pre-norm state fed back = the engines' false (eagle3.py)
    "specforge31": {"fc_norm": True},
    "aux4": {"num_aux_states": 4, "aux_layer_ids": (0, 1, 2, 3)},
    "aux4_norm_before_fc": {"num_aux_states": 4, "aux_layer_ids": (0, 1, 2, 3), "norm_before_fc": True},
    "no_aux": {"num_aux_states": 0, "aux_layer_ids": ()},
    "norm_before_residual": {"norm_before_residual": True},
    "two_layers": {"num_layers": 2},
    "qwen3": {"qk_norm": True, "base_model_type": "qwen3"},
    "vocab_null": {"lm_head_from_target": True, "draft_vocab_size": 256},
    "wide_target": {"target_hidden_size": 96, "hidden_size": 64},
    "fc_bias": {"fc_bias": True},
}
PLAIN = {"norm_before_fc": False, "fc_norm": False, "norm_output": False, "num_aux_states": 3,
         "aux_layer_ids": (0, 1, 3),
         "norm_before_residual": False, "num_layers": 1, "qk_norm": False, "lm_head_from_target": False,
         "draft_vocab_size": 64, "target_hidden_size": 64, "hidden_size": 64, "base_model_type": "llama",
         "fc_bias": False}


@pytest.mark.parametrize("name", VARIANTS)
def test_each_variant_is_detected_from_its_tensors(built, name):
    root, _, _ = built
    spec = load(root / name, root / target_of(name)).spec
    assert {k: getattr(spec, k) for k in PLAIN} == {**PLAIN, **EXPECTED[name]}
    assert spec.variant.startswith("EAGLE 3.1" if name in ("eagle31", "specforge31") else "EAGLE-3")
    assert spec.flag_sources["num_aux_states"].split(":")[0] == str(spec.num_aux_states)
    if name == "norm_before_fc_nested":
        assert "eagle_config.norm_before_fc agrees" in spec.flag_sources["norm_before_fc"]


# ---- the runner against the definition ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", VARIANTS)
def test_runner_matches_the_variant_definition(built, name):
    root, targets, canonical = built
    target = targets["wide" if VARIANTS[name].get("wide") else "narrow"]
    runner, spec = runner_head(root / name, target, root / target_of(name))
    tokens, features, first, second = two_steps(runner, spec)

    t = {k: v.double() if v.is_floating_point() else v for k, v in canonical[name].items()}
    embed = t.get("embed_tokens.weight", target["model.embed_tokens.weight"].double())
    lm_head = t.get("lm_head.weight", target["lm_head.weight"].double())
    f = features[0].double()
    g = reference_fc(t, spec, f) if spec.use_aux_hidden_state else f
    logits, fed = reference_layers(t, spec, tokens[0, :5], g, embed, lm_head)
    torch.testing.assert_close(first.logits[0].double(), logits, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(first.hidden[0].double(), fed, rtol=1e-4, atol=1e-4)
    # The fed-back row skips fc: its g is the previous row's output, attending over all six rows.
    logits2, _ = reference_layers(t, spec, tokens[0], torch.cat([g, fed[-1:]]), embed, lm_head)
    torch.testing.assert_close(second.logits[0, -1].double(), logits2[-1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("flag", ["norm_before_fc", "fc_norm", "norm_output", "norm_before_residual", "qk_norm"])
def test_each_flag_changes_the_numbers(built, flag):
    """A dropped flag must show: the same tensors run without it give other logits (so the round trips below and the
    engine checks can fail)."""
    root, targets, _ = built
    name = {"norm_before_fc": "norm_before_fc", "fc_norm": "eagle31", "norm_output": "eagle31",
            "norm_before_residual": "norm_before_residual", "qk_norm": "qwen3"}[flag]
    head = load(root / name, root / "target")
    runner, spec = runner_head(head, targets["narrow"])
    dropped = dataclasses.replace(head, spec=dataclasses.replace(spec, **{flag: False}))
    runner_without, _ = runner_head(dropped, targets["narrow"])
    _, _, first, second = two_steps(runner, spec)
    _, _, first_without, second_without = two_steps(runner_without, spec)
    changed = (first.logits - first_without.logits).abs().max() + (second.logits - second_without.logits).abs().max()
    assert float(changed) > 1e-3


# ---- every layout: the same head, or a refusal by name --------------------------------------------------------------

@pytest.mark.parametrize("to", LAYOUTS)
@pytest.mark.parametrize("name", VARIANTS)
def test_round_trip_to_every_layout(built, name, to, tmp_path):
    root, targets, _ = built
    target_dir, out = root / target_of(name), tmp_path / "out"
    if (name, to) in REFUSED:
        with pytest.raises(errors.UnsupportedConversionError, match=REFUSED[(name, to)]):
            eagle_convert.convert(str(root / name), str(target_dir), out, to=to)
        assert not out.exists()
        return
    eagle_convert.convert(str(root / name), str(target_dir), out, to=to)
    target = targets["wide" if VARIANTS[name].get("wide") else "narrow"]
    source_runner, source_spec = runner_head(root / name, target, target_dir)
    out_runner, out_spec = runner_head(out, target, target_dir)
    fields = [k for k in PLAIN if k not in ("lm_head_from_target", "draft_vocab_size")]
    assert {k: getattr(out_spec, k) for k in fields} == {k: getattr(source_spec, k) for k in fields}
    src, conv = two_steps(source_runner, source_spec), two_steps(out_runner, out_spec)
    for a, b in zip(src[2:], conv[2:]):
        assert torch.equal(source_runner.to_target_ids(a.logits.argmax(-1)),
                           out_runner.to_target_ids(b.logits.argmax(-1)))
        assert torch.equal(a.hidden, b.hidden)
    config = json.loads((out / "config.json").read_text())
    stated = config if to != "speculators" else {**config["transformer_layer_config"], **config}
    for key in ("norm_before_fc", "fc_norm", "norm_output", "norm_before_residual"):
        assert stated[key] is getattr(source_spec, key), key  # every flag written, true or false
    assert stated["num_aux_hidden_states"] == source_spec.num_aux_states
    assert stated["eagle_config"]["use_aux_hidden_state"] is source_spec.use_aux_hidden_state
    ids = list(source_spec.aux_layer_ids)
    if to == "sglang":  # SGLang's convention: outputs of layers, read from eagle_config only
        assert stated["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [i - 1 for i in ids]
        assert "eagle_aux_hidden_state_layer_ids" not in stated
    else:
        assert (stated["eagle_aux_hidden_state_layer_ids"] == ids
                == stated["eagle_config"]["eagle_aux_hidden_state_layer_ids"])


# ---- disagreements and refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant,changes,message", [
    ("base", {"norm_before_fc": True}, r"config norm_before_fc=True, but the tensors say norm_before_fc=false"),
    ("norm_before_fc", {"norm_before_fc": None, "eagle_config": {"norm_before_fc": False}},
     r"config eagle_config.norm_before_fc=False, but the tensors say norm_before_fc=true"),
    ("norm_before_fc", {"eagle_config": {"norm_before_fc": False}},
     r"at the top level but norm_before_fc=False in eagle_config"),
    ("eagle31", {"fc_norm": False}, r"fc_norm=False, but the tensors say fc_norm=true"),
    ("aux4", {"eagle_aux_hidden_state_layer_ids": [0, 1, 3]}, r"says 3 aux states, but fc.weight takes 256 = 4 x 64"),
    ("aux4", {"eagle_aux_hidden_state_layer_ids": None}, r"reads 4 aux states, but its config does not say which"),
    ("base", {"num_aux_hidden_states": 4},
     r"config num_aux_hidden_states says 4 aux states but config eagle_aux_hidden_state_layer_ids "
     r"\(\[0, 1, 3\]\) names 3"),
    ("base", {"eagle_config": {"use_aux_hidden_state": False}}, r"use_aux_hidden_state=False but fc.weight is present"),
    ("qwen3", {"model_type": "llama"}, r"q_norm/k_norm \(a Qwen3 layer\) but config model_type='llama'"),
    ("base", {"model_type": "qwen3"}, r"model_type='qwen3' but the tensors have no q_norm/k_norm"),
    ("base", {"use_aux_norm": True},
     r"use_aux_norm \(SGLang's legacy name for fc_norm\)=True, but the tensors say fc_norm=false"),
    ("base", {"eagle_config": {"use_input_layernorm_in_first_layer": False}},
     r"neither vLLM 0.32 nor SGLang 0.5.23 reads"),
])
def test_config_that_disagrees_with_the_tensors_is_an_error_naming_both(built, tmp_path, variant, changes, message):
    root, _, _ = built
    kw = VARIANTS[variant]
    make_variant_head(tmp_path / "head", **kw)
    edit_config(tmp_path / "head", **changes)
    with pytest.raises(errors.EagleConvertError, match=message):
        eagle_convert.convert(str(tmp_path / "head"), str(root / target_of(variant)), tmp_path / "out", to="vllm")
    assert not (tmp_path / "out").exists()


def test_refusals_are_one_paragraph_exit_1_nothing_written(built, tmp_path):
    """Through the CLI, one refusal per engine (the round trips above check every refusal in-process)."""
    root, _, _ = built
    for name, to in (("norm_before_residual", "sglang"), ("fc_bias", "vllm")):
        result = run_cli("convert", root / name, "--target", root / "target", "-o", tmp_path / "out", "--to", to)
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith("error: ") and "\n\n" not in result.stderr.strip()
        assert ("SGLang 0.5.23" if to == "sglang" else "vLLM 0.32") in flat(result.stderr)
        assert not (tmp_path / "out").exists()


def test_mla_head_is_refused_by_name(built, tmp_path):
    root, _, _ = built
    from safetensors.torch import load_file, save_file
    (tmp_path / "mla").mkdir()
    tensors = load_file(root / "base" / "model.safetensors")
    tensors["midlayer.self_attn.kv_a_proj_with_mqa.weight"] = torch.zeros(8, 128)
    tensors["midlayer.self_attn.kv_a_layernorm.weight"] = torch.ones(8)
    save_file(tensors, tmp_path / "mla" / "model.safetensors")
    (tmp_path / "mla" / "config.json").write_text((root / "base" / "config.json").read_text())
    with pytest.raises(errors.LayoutError, match=r"MLA \(multi-head latent attention\).*kv_a_layernorm\.weight, "
                                                 r"midlayer.self_attn.kv_a_proj_with_mqa"):
        eagle_convert.convert(str(tmp_path / "mla"), str(root / "target"), tmp_path / "out", to="vllm")
    assert not (tmp_path / "out").exists()
    assert eagle_convert.inspect(str(tmp_path / "mla")).problems[0].what.startswith(f"{tmp_path / 'mla'} is an MLA")


# ---- exporter inputs ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("exporter,variant,layout,note", [
    ("modelopt", "norm_before_fc", "modelopt", "eagle_module."),
    ("modelopt", "eagle31", "modelopt", "tie_word_embeddings: true"),
    ("legacy_fc_norm", "eagle31", "eagle3", None),
])
def test_exporter_layouts_read_as_the_same_head(built, tmp_path, exporter, variant, layout, note):
    root, targets, _ = built
    make_variant_head(tmp_path / "head", exporter=exporter, **VARIANTS[variant])
    head = load(tmp_path / "head", root / "target")
    assert head.layout.name == layout
    reference = load(root / variant, root / "target")
    assert {k: getattr(head.spec, k) for k in PLAIN} == {k: getattr(reference.spec, k) for k in PLAIN}
    assert set(head.tensors) == set(reference.tensors)
    if note:
        assert any(note in n for n in head.notes), head.notes
    if exporter == "modelopt":  # the target's copied layer count is overruled by the tensors, and said
        assert any("num_hidden_layers=4" in n and "tensors win" in n for n in head.notes)
    eagle_convert.convert(str(tmp_path / "head"), str(root / "target"), tmp_path / "out", to="vllm")
    assert json.loads((tmp_path / "out" / "config.json").read_text())["tie_word_embeddings"] is False


def test_speculators_checkpoint_reads_back_every_flag(built, tmp_path):
    root, _, _ = built
    eagle_convert.convert(str(root / "eagle31"), str(root / "target"), tmp_path / "spec", to="speculators")
    head = load(tmp_path / "spec", root / "target")
    assert head.layout.name == "speculators"
    assert (head.spec.fc_norm, head.spec.norm_output, head.spec.norm_before_residual) == (True, True, False)


def test_inspect_names_the_variant_and_where_each_flag_came_from(built):
    root, _, _ = built
    report = eagle_convert.inspect(str(root / "norm_before_fc_nested"), str(root / "target")).to_dict()
    assert report["variant"] == "EAGLE-3 (norm_before_fc)"
    assert report["flags"]["norm_before_fc"]["value"] is True
    assert "input_norm.weight present" in report["flags"]["norm_before_fc"]["source"]
    assert "eagle_config.norm_before_fc agrees" in report["flags"]["norm_before_fc"]["source"]
    assert report["flags"]["num_aux_states"]["value"] == 3


def test_readme_variant_table_matches_the_layouts():
    from pathlib import Path

    from eagle_convert.layouts.variant_table import variant_markdown_table
    readme = (Path(__file__).resolve().parents[2] / "docs" / "layouts.md").read_text()
    start = readme.index("<!-- variants-table")
    block = readme[readme.index("\n", start) + 1: readme.index("<!-- /variants-table -->")].strip()
    assert block == variant_markdown_table()


def test_sglang_refuses_a_draft_embedding_it_would_replace(built, tmp_path):
    """SGLang overwrites an EAGLE-3 draft's embedding with the target's when the widths match: a head whose own
    embedding differs is refused for --to sglang (rows sampled and compared), kept for --to vllm."""
    root, targets, _ = built
    from safetensors.torch import load_file, save_file
    own = torch.randn(256, 64, generator=torch.Generator().manual_seed(12345))  # seeded: never depends on test order
    for name, embed in (("own", own), ("copy", targets["narrow"]["model.embed_tokens.weight"])):
        head = tmp_path / name
        head.mkdir()
        tensors = load_file(root / "base" / "model.safetensors")
        tensors["embed_tokens.weight"] = embed.clone()
        save_file(tensors, head / "model.safetensors")
        (head / "config.json").write_text((root / "base" / "config.json").read_text())
    with pytest.raises(errors.UnsupportedConversionError, match="replaces a draft's embedding with the target's"):
        eagle_convert.convert(str(tmp_path / "own"), str(root / "target"), tmp_path / "out-own", to="sglang")
    assert not (tmp_path / "out-own").exists()
    eagle_convert.convert(str(tmp_path / "own"), str(root / "target"), tmp_path / "out-vllm", to="vllm")
    eagle_convert.convert(str(tmp_path / "copy"), str(root / "target"), tmp_path / "out-copy", to="sglang")
    assert (tmp_path / "out-copy" / "config.json").exists()


def test_dry_run_says_it_will_check_an_embedding_sglang_would_replace(built, tmp_path):
    """The dry run reads no embedding rows, so it cannot know the head will be refused for --to sglang: it says the
    check is still to come (result, human output and --json), instead of printing a clean plan."""
    from click.testing import CliRunner
    from safetensors.torch import load_file, save_file

    from eagle_convert.cli import main
    root, _, _ = built
    head = tmp_path / "own"
    head.mkdir()
    tensors = load_file(root / "base" / "model.safetensors")
    tensors["embed_tokens.weight"] = torch.randn(256, 64, generator=torch.Generator().manual_seed(12345))
    save_file(tensors, head / "model.safetensors")
    (head / "config.json").write_text((root / "base" / "config.json").read_text())
    args = ["convert", str(head), "-t", str(root / "target"), "--dry-run"]
    human = CliRunner().invoke(main, args + ["--to", "sglang"])
    assert human.exit_code == 0, human.output
    assert "will check: the draft's embed_tokens equals the target's on sampled rows (SGLang replaces" in human.output
    as_json = CliRunner().invoke(main, args + ["--to", "sglang", "--json"])
    assert json.loads(as_json.output)["will_check"] == [
        "the draft's embed_tokens equals the target's on sampled rows (SGLang replaces a draft's embedding with the "
        "target's; a difference is refused)"]
    with pytest.raises(errors.UnsupportedConversionError, match="replaces a draft's embedding"):  # what it said
        eagle_convert.convert(str(head), str(root / "target"), tmp_path / "out", to="sglang")
    vllm = CliRunner().invoke(main, args + ["--to", "vllm", "--json"])  # negative control: vLLM keeps the embedding
    assert json.loads(vllm.output)["will_check"] == []


@pytest.mark.parametrize("name", VARIANTS)
def test_bench_runs_each_variant_and_its_conversion_alike(built, name, tmp_path):
    """The whole bench (target, aux states, draft/verify loop) runs every variant, and the converted head gives the
    same report: a flag dropped by the conversion would change the drafts."""
    root, _, _ = built
    target = str(root / target_of(name))
    if (name, "vllm") in REFUSED:
        return  # bench runs the source head in the other tests; there is no conversion to compare
    eagle_convert.convert(str(root / name), target, tmp_path / "out", to="vllm")
    runs = [eagle_convert.bench(target, str(d), k=3, max_new_tokens=12, prompts=["t10 t11 t12", "t40 t7 t99"],
                                baseline=False).to_dict() for d in (root / name, tmp_path / "out")]
    source, converted = ({"acceptance": r["overall"]["acceptance"],
                          "outputs": [p["output_token_ids"] for p in r["prompts"]]}
                         for r in runs)
    assert source == converted
    assert runs[0]["settings"]["aux_layer_ids"] == list(VARIANTS[name].get("aux_ids", (0, 1, 3)) or [])


@pytest.mark.parametrize("name", VARIANTS)
def test_tree_drafting_runs_every_variant_losslessly(built, name):
    """Trees call the head through the same forward as chains: every variant drafts a dynamic tree whose output is the
    target's own greedy output."""
    root, _, _ = built
    report = eagle_convert.bench(str(root / target_of(name)), str(root / name), max_new_tokens=12,
                                 prompts=["t10 t11 t12", "t40 t7 t99"],
                                 tree=TreeOptions(tree="dynamic", depth=2, top_k=3, tokens=8)).to_dict()
    assert report["settings"]["tree"]["mode"] == "dynamic"
    assert report["lossless"] == {**report["lossless"], "mode": "exact", "identical": True}
    assert report["overall"]["acceptance"]["drafted"] == 7 * report["overall"]["acceptance"]["drafts"] > 0


@pytest.mark.parametrize("name", ["two_layers", "eagle31", "norm_before_residual", "aux4_norm_before_fc", "qwen3",
                                  "no_aux", "wide_target"])
def test_variant_tree_rows_equal_each_nodes_own_chain(built, name):
    """Lossless output cannot show a tree row that sees the wrong rows (verification repairs it): every node's draft
    score must equal the head's log-probs along its path run as a plain chain on a fresh head, so each row of every
    layer of every variant sees exactly its ancestors."""
    from eagle_convert.benchmark.session import load_target
    from eagle_convert.runner.heads import aux_layer_ids_for
    from eagle_convert.runner.trees.shapes import dynamic_tree
    from eagle_convert.runner.trees.tree_draft import draft_tree

    root, targets, _ = built
    target_dir = root / target_of(name)
    spec = load(root / name, target_dir).spec
    target = load_target(target_dir, dtype=torch.float32, device="cpu",
                         aux_layer_ids=aux_layer_ids_for(spec, TARGET.num_hidden_layers))
    tensors = targets["wide" if VARIANTS[name].get("wide") else "narrow"]
    ids = [3, 17, 40, 8, 99, 12]
    n = len(ids)
    out = target(torch.tensor([ids]), range(n))
    root_token = out.logits[0, -1].argmax()
    context = torch.tensor([ids[1:] + [int(root_token)]])

    def first_step(head):
        return head(context, head.target_feature(out), range(n), from_target=True, last_logits_only=True)

    head = runner_head(root / name, tensors, target_dir)[0]
    tree = draft_tree(head, first_step(head), root_token, n, dynamic_tree(2, 3, 10))
    assert tree.depths.max() == 3
    to_draft = {int(t): i for i, t in enumerate(head.draft_to_target.tolist())} if head.draft_to_target is not None \
        else {i: i for i in range(TARGET.vocab_size)}
    for node in range(1, tree.size):
        path = tree.paths[(tree.paths == node).any(1)][0]
        path = path[: int((path == node).nonzero()) + 1].tolist()
        fresh = runner_head(root / name, tensors, target_dir)[0]
        step, score = first_step(fresh), 0.0
        for depth, child in enumerate(path[1:], start=1):
            score += float(torch.log_softmax(step.logits[0, -1].float(), -1)[to_draft[int(tree.tokens[child])]])
            step = fresh(tree.tokens[child].view(1, 1), step.hidden[:, -1:], range(n - 1 + depth, n + depth),
                         from_target=False)
        assert abs(score - float(tree.scores[node])) < 1e-4, node
