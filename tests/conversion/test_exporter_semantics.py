"""Exporters whose config keys mean something other than what the engines read (issue: proof at any length, point 6).

- NVIDIA ModelOpt's deployment export (`layers.0.*`, ModelOpt's keys in eagle_config) states aux layer ids as the
  output of layer i (modelopt/torch/speculative/plugins/hf_eagle.py: a forward hook on layer i), so they are read +1,
  as its `eagle_module.*` form is; its other keys are honoured or refused by name.
- SpecForge's `norm_output` only sends the logits through `norm` (the pre-norm state is always fed back:
  specforge/algorithms/eagle3/model.py, llama3_eagle.py compute_logits); vLLM, SGLang and speculators always put the
  logits through `norm` and read `norm_output: true` as "feed back the normed state" (vllm llama_eagle3.py
  LlamaModel.forward `aux_output = hidden_states if self.norm_output else hidden_prenorm`; sglang llama_eagle3.py
  LlamaModel.forward `aux = hidden_states_to_logits if self.norm_output else hidden_states_to_aux`; speculators
  models/eagle3/core.py). So SpecForge's true is written as false, and SpecForge's false is refused."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from safetensors.torch import load_file, save_file
from support.convert import flat, run_cli
from support.variant_heads import TARGET, VARIANTS, make_variant_head
from support.variants import LAYOUTS, edit_config, load, runner_head

import eagle_convert
from eagle_convert import errors
from eagle_convert.benchmark.session import load_target
from eagle_convert.runner.heads import aux_layer_ids_for
from eagle_convert.testing.tiny import make_target

OURS = (1, 2, 3)  # the aux ids as eagle-convert (and vLLM) count them: the input of layer i
MODELOPT = [i - 1 for i in OURS]  # the same layers as ModelOpt writes them: the output of layer i


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    root = tmp_path_factory.mktemp("exporters")
    target = make_target(root / "target", TARGET)
    make_variant_head(root / "export", aux_ids=OURS, exporter="modelopt-export")
    make_variant_head(root / "eagle_module", aux_ids=OURS, exporter="modelopt")
    for name in ("specforge31", "eagle31"):
        make_variant_head(root / name, **VARIANTS[name])
    return root, target


def written_aux_ids(config: dict, to: str) -> dict[str, list[int]]:
    """Every place a layout states the aux ids, as written."""
    if to == "speculators":
        inner = config["transformer_layer_config"]
        return {"top": config["eagle_aux_hidden_state_layer_ids"],
                "transformer_layer_config.eagle_config": inner["eagle_config"]["eagle_aux_hidden_state_layer_ids"]}
    found = {"eagle_config": config["eagle_config"]["eagle_aux_hidden_state_layer_ids"]}
    if "eagle_aux_hidden_state_layer_ids" in config:
        found["top"] = config["eagle_aux_hidden_state_layer_ids"]
    return found


# ---- ModelOpt's export ----------------------------------------------------------------------------------------------

def test_modelopt_export_is_read_as_modelopt_with_its_aux_ids_plus_one(heads):
    root, _ = heads
    written = json.loads((root / "export" / "config.json").read_text())["eagle_config"]
    assert written["eagle_aux_hidden_state_layer_ids"] == MODELOPT
    head = load(root / "export", root / "target")
    assert head.layout.name == "modelopt" and "ModelOpt's eagle_config keys" in head.layout_reason
    assert head.spec.aux_layer_ids == OURS
    assert "read +1" in head.spec.flag_sources["aux_layer_ids"]
    reference = load(root / "eagle_module", root / "target")
    assert head.spec == dataclasses.replace(reference.spec, extra=head.spec.extra)
    assert set(head.tensors) == set(reference.tensors) - {"t2d"}


@pytest.mark.parametrize("to", LAYOUTS)
def test_modelopt_export_converts_with_aux_ids_plus_one_in_every_layout(heads, to, tmp_path):
    root, _ = heads
    eagle_convert.convert(str(root / "export"), str(root / "target"), tmp_path / "out", to=to)
    text = (tmp_path / "out" / "config.json").read_text()
    # SGLang reads eagle_config only and adds 1 itself (engine-notes.md): ModelOpt's own numbers go back there
    expected = {"vllm": {"top": list(OURS), "eagle_config": list(OURS)},
                "speculators": {"top": list(OURS), "transformer_layer_config.eagle_config": list(OURS)},
                "sglang": {"eagle_config": MODELOPT}}[to]
    assert written_aux_ids(json.loads(text), to) == expected
    for key in ("parallel_draft_step", "use_last_layernorm", "next_layer_regular"):  # ModelOpt's keys stay behind
        assert key not in text
    assert load(tmp_path / "out", root / "target").spec.aux_layer_ids == OURS  # and read back the same


def test_modelopt_export_drafts_as_its_eagle_module_form(heads):
    """On the real target features at the ids each form resolves to: the two forms draft identically; the export
    read with its ids unconverted (the old behaviour) drafts something else."""
    root, target_tensors = heads
    ids = [3, 17, 40, 8, 99, 12]

    def first_logits(head):
        target = load_target(root / "target", dtype=torch.float32, device="cpu",
                             aux_layer_ids=aux_layer_ids_for(head.spec, TARGET.num_hidden_layers))
        out = target(torch.tensor([ids]), range(len(ids)))
        runner = runner_head(head, target_tensors)[0]
        context = torch.tensor([ids[1:] + [int(out.logits[0, -1].argmax())]])
        return runner(context, runner.target_feature(out), range(len(ids)), from_target=True).logits

    export, module = load(root / "export", root / "target"), load(root / "eagle_module", root / "target")
    assert torch.equal(first_logits(export), first_logits(module))
    unconverted = dataclasses.replace(export, spec=dataclasses.replace(export.spec, aux_layer_ids=tuple(MODELOPT)))
    assert (first_logits(unconverted) - first_logits(export)).abs().max() > 1e-3


def test_modelopt_export_benches_as_its_eagle_module_form(heads):
    root, _ = heads
    runs = [eagle_convert.bench(str(root / "target"), str(root / d), k=3, max_new_tokens=12,
                                prompts=["t10 t11 t12", "t40 t7 t99"], baseline=False).to_dict()
            for d in ("export", "eagle_module")]
    assert runs[0]["settings"]["aux_layer_ids"] == runs[1]["settings"]["aux_layer_ids"] == list(OURS)
    assert runs[0]["overall"]["acceptance"] == runs[1]["overall"]["acceptance"]
    assert [p["output_token_ids"] for p in runs[0]["prompts"]] == [p["output_token_ids"] for p in runs[1]["prompts"]]


def _with_parallel_heads(folder):
    """What EagleMedusaExporter (hf_spec_export.py) adds for parallel_draft_step 2: one medusa head."""
    tensors = load_file(folder / "model.safetensors")
    tensors["parallel_draft_heads.0.medusa_layers.0.linear.weight"] = torch.zeros(64, 64)
    save_file(tensors, folder / "model.safetensors")


@pytest.mark.parametrize("keys,variant,message", [
    ({"parallel_draft_step": 2}, "base", "parallel_draft_step=2"),
    ({"use_mtp_layernorm": True}, "no_aux", "use_mtp_layernorm=true"),
    ({"next_layer_regular": False}, "base", "next_layer_regular=false"),
    ({"use_last_layernorm": False}, "base", "use_last_layernorm=false"),
    ({"use_input_layernorm_in_first_layer": False}, "base", "use_input_layernorm_in_first_layer=false"),
])
def test_modelopt_keys_without_an_engine_equivalent_are_refused_by_name(heads, tmp_path, keys, variant, message):
    root, _ = heads
    kw = {**VARIANTS[variant], "aux_ids": VARIANTS[variant].get("aux_ids", OURS)}
    make_variant_head(tmp_path / "head", exporter="modelopt-export", modelopt_keys=keys, **kw)
    if "parallel_draft_step" in keys:
        _with_parallel_heads(tmp_path / "head")
    before = (tmp_path / "head" / "config.json").read_bytes()
    result = run_cli("convert", tmp_path / "head", "--target", root / "target", "-o", tmp_path / "out", "--to", "vllm")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and "\n\n" not in result.stderr.strip()
    assert message in flat(result.stderr) and "ModelOpt" in flat(result.stderr)
    assert not (tmp_path / "out").exists()
    assert (tmp_path / "head" / "config.json").read_bytes() == before
    for to in ("speculators", "sglang"):
        with pytest.raises(errors.LayoutError, match=message):
            eagle_convert.convert(str(tmp_path / "head"), str(root / "target"), tmp_path / to, to=to)
        assert not (tmp_path / to).exists()


def test_modelopt_keys_with_their_defaults_convert(heads, tmp_path):
    """Negative control for the refusals: ModelOpt's usual values (parallel_draft_step 1, use_mtp_layernorm false with
    aux states, next_layer_regular and both norms true) are the plain EAGLE-3 head."""
    root, _ = heads
    cfg = json.loads((root / "export" / "config.json").read_text())["eagle_config"]
    assert (cfg["parallel_draft_step"], cfg["use_mtp_layernorm"], cfg["next_layer_regular"]) == (1, False, True)
    eagle_convert.convert(str(root / "export"), str(root / "target"), tmp_path / "out", to="vllm")
    assert (tmp_path / "out" / "config.json").exists()


# ---- SpecForge's norm_output ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("to", LAYOUTS)
def test_specforge_norm_output_is_written_as_the_engines_false(heads, to, tmp_path):
    """SpecForge trained the head feeding back the pre-norm state with logits through norm: what every engine runs
    with norm_output false. An engine-side config (eagle31: it states num_aux_hidden_states) keeps its true."""
    root, _ = heads
    assert json.loads((root / "specforge31" / "config.json").read_text())["norm_output"] is True
    for name, expected in (("specforge31", False), ("eagle31", True)):
        out = tmp_path / name
        eagle_convert.convert(str(root / name), str(root / "target"), out, to=to)
        config = json.loads((out / "config.json").read_text())
        stated = config if to != "speculators" else {**config["transformer_layer_config"], **config}
        assert stated["norm_output"] is expected, name
        assert stated["fc_norm"] is True
    head = load(root / "specforge31", root / "target")
    assert any("SpecForge" in n and "read and written as false" in n for n in head.notes), head.notes


def test_specforge_head_feeds_back_the_pre_norm_state(heads):
    """The runner runs the SpecForge head as SpecForge trained it: fed-back state = the pre-norm output (the eagle31
    head, the same tensors with the engines' norm_output true, feeds back another state: the flag acts)."""
    root, target_tensors = heads
    outputs = {}
    for name in ("specforge31", "eagle31"):
        runner, spec = runner_head(root / name, target_tensors, root / "target")
        g = torch.Generator().manual_seed(0)
        tokens = torch.randint(0, spec.vocab_size, (1, 5), generator=g)
        features = torch.randn(1, 5, spec.num_aux_states * spec.target_hidden_size, generator=g)
        outputs[name] = (runner(tokens, features, range(5), from_target=True), runner.norm, spec.rms_norm_eps)
    (sf, norm, eps), (engine, _, _) = outputs["specforge31"], outputs["eagle31"]
    torch.testing.assert_close(sf.logits, engine.logits)  # logits through norm in both
    normed = sf.hidden * torch.rsqrt(sf.hidden.pow(2).mean(-1, keepdim=True) + eps) * norm
    torch.testing.assert_close(engine.hidden, normed)  # the engine variant feeds back norm(pre-norm state)
    assert (sf.hidden - engine.hidden).abs().max() > 1e-3


def test_specforge_norm_output_false_is_refused_by_name(heads, tmp_path):
    root, _ = heads
    make_variant_head(tmp_path / "head", **VARIANTS["specforge31"])
    edit_config(tmp_path / "head", norm_output=False)
    result = run_cli("convert", tmp_path / "head", "--target", root / "target", "-o", tmp_path / "out", "--to", "vllm")
    assert result.returncode == 1, result.stderr
    assert result.stderr.startswith("error: ") and "\n\n" not in result.stderr.strip()
    assert "norm_output=false" in flat(result.stderr) and "SpecForge" in flat(result.stderr)
    assert not (tmp_path / "out").exists()
    for to in ("speculators", "sglang"):
        with pytest.raises(errors.LayoutError, match="logits skip the final norm"):
            eagle_convert.convert(str(tmp_path / "head"), str(root / "target"), tmp_path / to, to=to)
        assert not (tmp_path / to).exists()
