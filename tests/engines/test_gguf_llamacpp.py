"""`convert --to gguf` in real llama.cpp b11434 (`make test-llamacpp`): the engine pair's head (support/engine_pair.py,
agreeing with its target only through taps 2, 6, 9) written by eagle-convert and by llama.cpp's own converter. The two
files hold the same keys and bit-equal tensors; llama-speculative-simple accepts the same tokens from both on every
prompt, and its output is llama-simple's greedy output. Negative controls: the same head written with its taps one
layer deeper, or with d2t left as HF's offsets, each gets its accepted tokens falling.

RoPE scaling (support/rope_pair.py: the pair with Llama-3.1's `rope_type: llama3` on both sides, the head's attention
made to matter): llama3, linear and YaRN heads get the converter's keys and bit-equal tensors (llama3: its
`rope_freqs.weight`), and llama.cpp accepts the same tokens from our llama3 file as from its converter's. Negative
controls: the same file without rope_freqs, or with divisors computed from a wrong factor, each changes the counts."""

from __future__ import annotations

import json

import pytest
import torch
from support.engine_pair import HEADS, HIDDEN, TAPS, build_engine_pair
from support.llamacpp import LLAMACPP_BIN, LLAMACPP_CONVERT, convert, parse_counters, plain, speculative
from support.rope_pair import LLAMA3, build_llama3_pair, with_rope_scaling

import eagle_convert
from eagle_convert.io.gguf_file import GgufTensor, read_gguf, write_gguf
from eagle_convert.rope.ggml_factors import llama3_rope_factors

pytestmark = pytest.mark.llamacpp
K, MAX_TOKENS = 3, 32
# Not written by eagle-convert: a cosmetic size label, and the target's tokenizer (the loader needs only
# tokenizer.ggml.model, and the EAGLE-3 speculator never reads the draft's vocabulary: layouts/gguf.py).
NOT_WRITTEN = {"general.size_label"}


def skip_without_llamacpp():
    if not (LLAMACPP_BIN and LLAMACPP_CONVERT):
        pytest.skip("LLAMACPP_BIN / LLAMACPP_CONVERT are not set (run `make test-llamacpp`)")


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    skip_without_llamacpp()
    root = tmp_path_factory.mktemp("gguf-llamacpp")
    return converted_pair(root, build_engine_pair(root))


def converted_pair(root, paths) -> dict:
    """The pair's head written by us and by llama.cpp's converter, the target's GGUF, the prompts and the target's
    plain greedy output for each."""
    eagle_convert.convert(str(paths["eagle3"]), str(paths["target"]), root / "ours", to="gguf", dtype="float32")
    target_gguf = convert(paths["target"], root / "target.gguf")
    prompts = [json.loads(line)["text"] for line in paths["prompts"].read_text().splitlines()]
    # speculative-simple stops once past -n, so it can overshoot by up to k tokens: the plain run is longer
    return {"root": root, "target_gguf": target_gguf,
            "theirs": convert(paths["eagle3"], root / "theirs.gguf", target=paths["target"]),
            "ours": root / "ours" / "eagle3.gguf", "eagle3": paths["eagle3"], "target": paths["target"],
            "prompts": prompts, "plain": [plain(target_gguf, p, max_tokens=MAX_TOKENS + K + 1) for p in prompts]}


@pytest.fixture(scope="module")
def ours_accepted(pair):
    return accepted_per_prompt(pair, pair["ours"])


def accepted_per_prompt(pair, head) -> list[tuple[int, int]]:
    """(accepted, drafted) per prompt, each run's output checked against llama.cpp's plain greedy decoding."""
    counts = []
    for prompt, reference in zip(pair["prompts"], pair["plain"]):
        text, log = speculative(pair["target_gguf"], head, prompt, k=K, max_tokens=MAX_TOKENS)
        assert len(text) >= MAX_TOKENS and reference.startswith(text), (text, reference)
        c = parse_counters(log)
        assert c.n_accept == c.acc_tokens
        counts.append((c.n_accept, c.n_drafted))
    return counts


def test_our_file_has_the_keys_and_tensors_of_llamacpps_converter(pair):
    assert_same_file(pair["ours"], pair["theirs"])


def assert_same_file(ours_path, theirs_path):
    ours, theirs = read_gguf(ours_path), read_gguf(theirs_path)
    keys = {k for k in theirs.metadata if not k.startswith("tokenizer.")} - NOT_WRITTEN
    assert {k: ours.metadata[k] for k in keys} == {k: theirs.metadata[k] for k in keys}
    assert {k: ours.types[k] for k in keys} == {k: theirs.types[k] for k in keys}
    assert set(ours.metadata) - keys == {"tokenizer.ggml.model"}
    assert set(ours.tensors) == set(theirs.tensors)
    for name in theirs.tensors:  # same dtype and shape, bit-equal (both fp32; d2t I64)
        assert ours.tensors[name][:2] == theirs.tensors[name][:2] and ours.raw(name) == theirs.raw(name), name


def test_llamacpp_accepts_the_same_tokens_from_our_file_as_from_its_own_converters(pair, ours_accepted):
    ours, theirs = ours_accepted, accepted_per_prompt(pair, pair["theirs"])
    assert ours == theirs
    accepted, drafted = map(sum, zip(*ours))
    assert 0 < accepted < drafted  # the pair agrees in part: 0 would prove nothing


def test_negative_control_taps_one_layer_deeper_lose_the_accepted_tokens(pair, ours_accepted, tmp_path):
    shifted = tmp_path / "shifted"
    config = json.loads((pair["eagle3"] / "config.json").read_text())
    shifted.mkdir()
    for f in pair["eagle3"].iterdir():
        (shifted / f.name).write_bytes(f.read_bytes())
    (shifted / "config.json").write_text(json.dumps(config | {"eagle_aux_hidden_state_layer_ids":
                                                              [i + 1 for i in TAPS]}))
    eagle_convert.convert(str(shifted), str(pair["target"]), tmp_path / "out", to="gguf", dtype="float32")
    assert read_gguf(tmp_path / "out" / "eagle3.gguf").metadata["eagle3.target_layers"] == [i + 1 for i in TAPS]
    good = sum(a for a, _ in ours_accepted)
    assert sum(a for a, _ in accepted_per_prompt(pair, tmp_path / "out" / "eagle3.gguf")) < good


def test_negative_control_d2t_left_as_offsets_loses_the_accepted_tokens(pair, ours_accepted, tmp_path):
    """The same file with d2t as HF stores it (offsets): llama.cpp maps draft tokens to the wrong target ids."""
    ours = read_gguf(pair["ours"])
    offsets = ours.tensor("d2t") - torch.arange(ours.tensors["d2t"][1][0])
    values = {name: ours.tensor(name) for name in ours.tensors} | {"d2t": offsets}
    write_gguf(tmp_path / "offsets.gguf", {k: (ours.types[k], v) for k, v in ours.metadata.items()},
               [GgufTensor(name, dtype, shape) for name, (dtype, shape, _) in ours.tensors.items()],
               lambda t: values[t.name])
    good = sum(a for a, _ in ours_accepted)
    assert sum(a for a, _ in accepted_per_prompt(pair, tmp_path / "offsets.gguf")) < good


# ---- RoPE scaling ---------------------------------------------------------------------------------------------------
ATTENTION = 1.0  # the head's o_proj scale (support/rope_pair.py): its drafts then depend on its RoPE


@pytest.fixture(scope="module")
def llama3_pair(tmp_path_factory):
    skip_without_llamacpp()
    root = tmp_path_factory.mktemp("gguf-llamacpp-llama3")
    return converted_pair(root, build_llama3_pair(root, attention=ATTENTION))


@pytest.mark.parametrize("scaling", [LLAMA3, {"rope_type": "linear", "factor": 2.0},
                                     {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128,
                                      "beta_fast": 32.0, "beta_slow": 1.0}], ids=["llama3", "linear", "yarn"])
def test_scaled_heads_get_the_keys_and_tensors_of_llamacpps_converter(scaling, tmp_path):
    skip_without_llamacpp()
    paths = build_llama3_pair(tmp_path)
    for role in ("eagle3", "target"):
        with_rope_scaling(paths[role], scaling)
    eagle_convert.convert(str(paths["eagle3"]), str(paths["target"]), tmp_path / "ours", to="gguf", dtype="float32")
    theirs = convert(paths["eagle3"], tmp_path / "theirs.gguf", target=paths["target"])
    assert_same_file(tmp_path / "ours" / "eagle3.gguf", theirs)
    written = read_gguf(theirs)
    assert ("rope_freqs.weight" in written.tensors) == (scaling is LLAMA3)  # the comparison covers the tensor
    assert written.metadata.get("eagle3.rope.scaling.type") == {"linear": "linear", "yarn": "yarn"}.get(
        scaling["rope_type"])


@pytest.fixture(scope="module")
def llama3_accepted(llama3_pair):
    return accepted_per_prompt(llama3_pair, llama3_pair["ours"])


def test_llamacpp_accepts_the_same_tokens_from_our_llama3_file_as_from_its_converters(llama3_pair, llama3_accepted):
    assert llama3_accepted == accepted_per_prompt(llama3_pair, llama3_pair["theirs"])
    accepted, drafted = map(sum, zip(*llama3_accepted))
    assert 0 < accepted < drafted


def with_rope_freqs(source, out, divisors):
    """`source` rewritten with another rope_freqs tensor (None: without one)."""
    head = read_gguf(source)
    values = {name: head.tensor(name) for name in head.tensors} | {"rope_freqs.weight": divisors}
    tensors = [GgufTensor(name, dtype, shape) for name, (dtype, shape, _) in head.tensors.items()
               if divisors is not None or name != "rope_freqs.weight"]
    write_gguf(out, {k: (head.types[k], v) for k, v in head.metadata.items()}, tensors, lambda t: values[t.name])
    return out


@pytest.mark.parametrize("divisors", ["omitted", "factor 2"])
def test_negative_control_rope_freqs_omitted_or_from_a_wrong_factor_changes_the_counts(
        llama3_pair, llama3_accepted, divisors, tmp_path):
    wrong = None if divisors == "omitted" else llama3_rope_factors(HIDDEN // HEADS, 10000.0, LLAMA3 | {"factor": 2.0})
    head = with_rope_freqs(llama3_pair["ours"], tmp_path / "control.gguf", wrong)
    assert accepted_per_prompt(llama3_pair, head) != llama3_accepted
