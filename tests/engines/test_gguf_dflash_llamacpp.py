"""`convert --to gguf` of a DFlash head in real llama.cpp b11434 (`make test-llamacpp`): the agreeing tiny pair
(support/dflash_llamacpp_pair.py: its head proposes the target's next token only when fed the output of target layer
0) written by eagle-convert (with `--target-gguf`: the target GGUF's vocabulary copied in) and by llama.cpp's own
converter. The two files hold the same keys, vocabulary included, and bit-equal tensors; llama-speculative-simple
`--spec-type draft-dflash` accepts the same tokens from ours as from its converter's, and its output is llama-simple's
greedy output. Negative controls: the same file with the first tap one layer deeper (speculators' input count read as
z-lab's output count, as an untranslated copy would be) loses accepted tokens; without `--target-gguf` llama.cpp
aborts; another model's GGUF (the draft's own, 1 layer) is refused."""

from __future__ import annotations

import json
import subprocess

import pytest
from support.dflash_llamacpp_pair import build_dflash_llamacpp_pair
from support.llamacpp import LLAMACPP_BIN, LLAMACPP_CONVERT, THREADS, _tool, convert, generated_text, plain

import eagle_convert
from eagle_convert.errors import EagleConvertError
from eagle_convert.io.gguf_file import GgufTensor, read_gguf, write_gguf

pytestmark = pytest.mark.llamacpp
K, MAX_TOKENS = 3, 24
COSMETIC = {"general.size_label", "general.name"}  # the converter derives both from the folder and the byte count


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not (LLAMACPP_BIN and LLAMACPP_CONVERT):
        pytest.skip("LLAMACPP_BIN / LLAMACPP_CONVERT are not set (run `make test-llamacpp`)")
    root = tmp_path_factory.mktemp("gguf-dflash")
    paths = build_dflash_llamacpp_pair(root)
    target_gguf = convert(paths["target"], root / "target.gguf")
    out = {"root": root, "target_gguf": target_gguf, "paths": paths,
           "prompts": [json.loads(line)["text"] for line in paths["prompts"].read_text().splitlines()]}
    for head in ("zlab", "jetspec", "speculators"):
        eagle_convert.convert(str(paths[head]), str(paths["target"]), root / f"ours-{head}", to="gguf",
                              dtype="float32", target_gguf=str(target_gguf))
        out[f"ours-{head}"] = root / f"ours-{head}" / "dflash.gguf"
    eagle_convert.convert(str(paths["zlab"]), str(paths["target"]), root / "bare", to="gguf", dtype="float32")
    out["bare"] = root / "bare" / "dflash.gguf"  # no --target-gguf: no vocabulary
    for head in ("zlab", "jetspec"):  # llama.cpp's converter registers DFlashDraftModel only (not speculators)
        out[f"theirs-{head}"] = convert(paths[head], root / f"theirs-{head}.gguf", target=paths["target"])
    out["plain"] = [plain(target_gguf, p, max_tokens=MAX_TOKENS + K + 1) for p in out["prompts"]]
    return out


def speculative_dflash(target_gguf, draft_gguf, prompt: str) -> subprocess.CompletedProcess:
    return subprocess.run([_tool("llama-speculative-simple"), "-m", str(target_gguf), "-md", str(draft_gguf),
                           "--spec-type", "draft-dflash", "--spec-draft-n-max", str(K), "-n", str(MAX_TOKENS),
                           "-p", prompt, "--temp", "0", "--top-k", "1", "-t", THREADS, "-lv", "4"],
                          capture_output=True, text=True, timeout=600)


def accepted(pair, draft_gguf) -> list[tuple[int, int]]:
    """(n_accept, n_drafted) per prompt, each output checked against llama.cpp's plain greedy decoding."""
    import re

    counts = []
    for prompt, reference in zip(pair["prompts"], pair["plain"]):
        run = speculative_dflash(pair["target_gguf"], draft_gguf, prompt)
        assert run.returncode == 0, run.stderr[-2000:]
        text = generated_text(run.stdout, prompt)
        assert len(text) >= MAX_TOKENS and reference.startswith(text), (text, reference)
        log = run.stdout + run.stderr
        counts.append(tuple(int(re.findall(rf"\b{key}\s*=\s*(\d+)", log)[-1]) for key in ("n_accept", "n_drafted")))
    return counts


@pytest.mark.parametrize("head", ["zlab", "jetspec"])
def test_our_file_has_the_keys_and_tensors_of_llamacpps_converter(pair, head):
    ours, theirs = read_gguf(pair[f"ours-{head}"]), read_gguf(pair[f"theirs-{head}"])
    keys = set(theirs.metadata) - COSMETIC  # the vocabulary included: --target-gguf copied the target's
    assert {k: (ours.types[k], ours.metadata[k]) for k in keys} == {k: (theirs.types[k], theirs.metadata[k])
                                                                    for k in keys}
    assert ours.metadata["dflash.target_layers"] == [1, 3]  # z-lab's [0, 2] (outputs) as llama.cpp's inputs
    assert len(ours.metadata["tokenizer.ggml.tokens"]) == 256 and ours.metadata["tokenizer.ggml.model"] != "none"
    # causal is always stated (the converter writes it only when the config does: z-lab's head states nothing)
    assert set(ours.metadata) - keys - COSMETIC == ({"dflash.attention.causal"} if head == "zlab" else set())
    assert ours.metadata["tokenizer.ggml.mask_token_id"] == theirs.metadata["tokenizer.ggml.mask_token_id"] == 255
    assert set(ours.tensors) == set(theirs.tensors)
    for name in theirs.tensors:
        assert ours.tensors[name][:2] == theirs.tensors[name][:2] and ours.raw(name) == theirs.raw(name), name


def test_the_speculators_head_gives_the_same_file(pair):
    ours, zlab = read_gguf(pair["ours-speculators"]), read_gguf(pair["ours-zlab"])
    assert ours.metadata == zlab.metadata and all(ours.raw(n) == zlab.raw(n) for n in zlab.tensors)


@pytest.fixture(scope="module")
def ours_accepted(pair):
    return accepted(pair, pair["ours-speculators"])


def test_llamacpp_accepts_the_same_tokens_from_our_file_as_from_its_converters(pair, ours_accepted):
    assert ours_accepted == accepted(pair, pair["theirs-zlab"])
    n_accept, n_drafted = map(sum, zip(*ours_accepted))
    assert 0 < n_accept < n_drafted  # the first draft position agrees, the others need not: 0 would prove nothing


def test_negative_control_untranslated_ids_lose_the_accepted_tokens(pair, ours_accepted):
    ours = read_gguf(pair["ours-zlab"])
    meta = {k: (ours.types[k], v) for k, v in ours.metadata.items()} | {
        "dflash.target_layers": ("ARRAY[INT32]", [2, 3])}  # speculators' inputs [1, 3] read as outputs: first +1
    wrong = pair["root"] / "untranslated.gguf"
    write_gguf(wrong, meta, [GgufTensor(n, d, s) for n, (d, s, _) in ours.tensors.items()],
               lambda t: ours.tensor(t.name))
    assert sum(a for a, _ in accepted(pair, wrong)) < sum(a for a, _ in ours_accepted)


def test_without_target_gguf_llamacpp_aborts_rather_than_drafting(pair):
    """What b11434 does with the file written without --target-gguf (`tokenizer.ggml.model = none`): no vocabulary,
    no mask token, and it aborts on the first draft batch: loud, never a silent run (and convert warned)."""
    run = speculative_dflash(pair["target_gguf"], pair["bare"], pair["prompts"][0])
    assert run.returncode != 0
    assert "failed to add token" in run.stdout + run.stderr


def test_another_models_gguf_is_refused(pair, tmp_path):
    """llama.cpp's DFlash draft holds the target's 256 tokens but 1 layer: not the target's GGUF, refused by name."""
    with pytest.raises(EagleConvertError, match="not the GGUF of this target: it holds 1 layers"):
        eagle_convert.convert(str(pair["paths"]["zlab"]), str(pair["paths"]["target"]), tmp_path / "out",
                              to="gguf", target_gguf=str(pair["theirs-zlab"]))
    assert not (tmp_path / "out").exists()
