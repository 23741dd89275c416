"""`bench --engine llamacpp` without llama.cpp: the ids-as-text bridge (engines/llamacpp_vocab.py), the refusals
(tools missing, options that belong to vLLM, sampling), and the llama.cpp-aligned --compare gate on made-up reports
(benchmark/llamacpp_bench.py): it gates accepted drafts and tokens, and shows drafted totals without gating them."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner
from support.engine_pair import build_engine_pair

from eagle_convert.benchmark.llamacpp_bench import llamacpp_compare_gate
from eagle_convert.cli.main import main
from eagle_convert.engines.llamacpp import LlamaCppTools
from eagle_convert.engines.llamacpp_vocab import BYTE, CONTROL, NORMAL, LlamaCppVocab
from eagle_convert.errors import EngineError

SPM = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.tokens": ["<unk>", "<s>", "</s>", "\u2581", "a", "b",
                                                                   "\u2581ab", "<0x0A>"],
       "tokenizer.ggml.token_type": [2, CONTROL, CONTROL, NORMAL, NORMAL, NORMAL, NORMAL, BYTE],
       "tokenizer.ggml.bos_token_id": 1, "tokenizer.ggml.eos_token_id": 2, "tokenizer.ggml.add_bos_token": True}


def test_spm_ids_render_as_llamacpp_prints_them_and_the_prompt_drops_what_it_adds_itself():
    vocab = LlamaCppVocab.from_metadata(SPM)
    assert vocab.render([1, 3, 4, 5, 7]) == b"<s> ab\n"
    # llama.cpp adds the BOS and the leading word boundary itself: the text it is given has neither
    assert vocab.prompt_text([1, 3, 4, 5]) == "ab"
    assert vocab.prompt_text([4, 5]) == "ab"


def test_byte_level_bpe_pieces_are_decoded_to_their_bytes():
    gpt2 = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["\u0120hi", "\u010a", "<|im_end|>"],
            "tokenizer.ggml.token_type": [NORMAL, NORMAL, CONTROL]}
    vocab = LlamaCppVocab.from_metadata(gpt2)
    assert vocab.render([0, 1, 2]) == b" hi\n<|im_end|>"
    assert vocab.prompt_text([0]) == " hi"  # no word boundary is added for BPE


def test_printed_text_splits_back_into_ids_only_when_the_count_agrees():
    vocab = LlamaCppVocab.from_metadata(SPM)
    assert vocab.ids_of(b" ab\n", 2, "t") == [6, 7]  # longest match: "▁ab", then the newline byte
    # llama.cpp generated " " "a" "b" "\n" (4 tokens): longest match finds 2, so the ids cannot be known
    with pytest.raises(EngineError, match="cannot be recovered exactly"):
        vocab.ids_of(b" ab\n", 4, "t")
    # the target tokenizer's split is taken when it has the count llama.cpp reported
    assert vocab.ids_of(b" ab\n", 4, "t", encode=lambda text: [3, 4, 5, 7]) == [3, 4, 5, 7]
    with pytest.raises(EngineError, match="no token of the target GGUF spells"):
        vocab.ids_of(b"xyz", 3, "t")


def test_byte_level_bpe_takes_the_tokenizers_split_first_and_an_end_of_generation_may_print_fewer():
    gpt2 = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": ["\u0120hi", "\u0120", "h", "i"],
            "tokenizer.ggml.token_type": [NORMAL] * 4}
    vocab = LlamaCppVocab.from_metadata(gpt2)
    tokenizer = lambda text: [1, 2, 3]  # noqa: E731  (the target tokenizer's split of b" hi")
    assert vocab.ids_of(b" hi", 3, "t", encode=tokenizer) == [1, 2, 3]
    assert vocab.ids_of(b" hi", 1, "t", encode=tokenizer) == [0]  # its count decides
    # speculative-simple stopped at an end-of-generation token: it printed at most what it generated
    assert vocab.ids_of(b" hi", None, "t", encode=tokenizer, at_most=5) == [1, 2, 3]
    with pytest.raises(EngineError, match="3 or 1 pieces"):
        vocab.ids_of(b" hi", 2, "t", encode=tokenizer)


def test_missing_tools_name_make_llamacpp(tmp_path):
    with pytest.raises(EngineError) as error:
        LlamaCppTools.find(str(tmp_path))
    assert "make llamacpp" in error.value.hint and "llama-speculative-simple" in str(error.value)


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    return build_engine_pair(tmp_path_factory.mktemp("pair"))


def bench(pair, *extra):
    args = ["bench", "-t", pair["target"], "-d", pair["eagle3"], "--prompts", pair["prompts"], "--max-new-tokens",
            "4", "-q", *extra]
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_bench_without_the_tools_is_one_paragraph_and_exit_1(pair, tmp_path):
    result = bench(pair, "--engine", "llamacpp", "--engine-bin", tmp_path)
    assert result.exit_code == 1, result.output
    assert "make llamacpp" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--engine", "llamacpp", "--engine-arg", "x=1"], "--engine-arg does not apply to --engine llamacpp"),
    (["--engine", "vllm", "--engine-bin", "."], "--engine-bin does not apply to --engine vllm"),
    (["--engine", "llamacpp", "--concurrency", "2"], "--concurrency does not apply to --engine llamacpp"),
    (["--engine", "openvino", "--engine-url", "http://x"], "--engine-url does not apply to --engine openvino"),
    (["--engine", "openvino", "--tensor-parallel-size", "2"], "--tensor-parallel-size does not apply"),
    (["--engine-bin", "."], "--engine-bin applies to an engine: add --engine llamacpp"),
])
def test_options_of_another_engine_are_usage_errors(pair, args, message):
    result = bench(pair, *args)
    assert result.exit_code == 2 and message in result.output, result.output


def test_sampling_is_refused_before_anything_runs(pair, tmp_path):
    result = bench(pair, "--engine", "llamacpp", "--engine-bin", tmp_path, "--temperature", "0.5")
    assert result.exit_code == 1 and "greedy decoding only" in result.output, result.output


def _report(accepted, drafts, tokens, dtype="float32", drafted_tokens=None):
    prompts = [{"id": str(i), "output_token_ids": [t], "acceptance": {
        "drafts": d, "drafted": 3 * d, "accepted": a, "histogram": [], "mean_acceptance_length": 1 + a / d}}
        for i, (a, d, t) in enumerate(zip(accepted, drafts, tokens))]
    counters = [{"id": str(i), "num_draft_tokens": n} for i, n in enumerate(drafted_tokens or [3 * d for d in drafts])]
    return {"settings": {"dtype": dtype, "k": 3}, "prompts": prompts, "engine": {"counters": {"prompts": counters}}}


def test_compare_gates_accepted_and_tokens_and_shows_drafted_apart():
    ours = _report([7, 7], [9, 8], [[1, 2], [3]])
    # llama.cpp: one more round per prompt, a draft cut short, the same accepted drafts and tokens: passes
    gate, rows = llamacpp_compare_gate(ours, _report([7, 7], [10, 9], [[1, 2], [3]], drafted_tokens=[29, 26]), "l")
    assert gate.passed and [r["identical"] for r in rows] == [True, True]
    assert gate.details["drafted"]["ours"] == 51 and gate.details["drafted"]["engine"] == 55
    assert "drafted 51 (ours) vs 55" in gate.message


@pytest.mark.parametrize("engine", [_report([7, 6], [10, 9], [[1, 2], [3]]),  # one draft fewer accepted
                                    _report([7, 7], [10, 9], [[1, 2], [4]])])  # another token
def test_compare_fails_on_accepted_drafts_or_tokens(engine):
    gate, rows = llamacpp_compare_gate(_report([7, 7], [9, 8], [[1, 2], [3]]), engine, "l")
    assert not gate.passed and gate.details["differing_prompts"] == ["1"] and not rows[1]["identical"]


def test_more_accepted_in_no_more_rounds_is_llamacpps_first_round_and_passes_shown():
    ours = _report([26, 22], [38, 41], [[1], [2]])
    gate, rows = llamacpp_compare_gate(ours, _report([27, 22], [38, 42], [[1], [2]]), "l")  # measured, real pair
    assert gate.passed and gate.details["first_round_accepted"] == ["0"] and rows[0]["first_round_accepted"]
    assert "extra first round accepted drafts too" in gate.message
    # more accepted but in MORE rounds than ours is no first round's doing: it fails
    gate, _ = llamacpp_compare_gate(ours, _report([27, 22], [39, 42], [[1], [2]]), "l")
    assert not gate.passed and gate.details["differing_prompts"] == ["0"]
    # more than one round's k drafts more (one turn here) is no first round's doing either: it fails
    gate, _ = llamacpp_compare_gate(ours, _report([30, 22], [38, 42], [[1], [2]]), "l")
    assert not gate.passed and gate.details["differing_prompts"] == ["0"]
    gate, _ = llamacpp_compare_gate(ours, _report([29, 22], [38, 42], [[1], [2]]), "l")  # control: k = 3 more passes
    assert gate.passed


def test_compare_is_not_gated_outside_float32():
    gate, _ = llamacpp_compare_gate(_report([7], [9], [[1]], "bfloat16"), _report([1], [9], [[1]]), "l")
    assert gate.passed and gate.details["exact"] is False and gate.details["differing_prompts"] == ["0"]


def test_a_gguf_compared_without_the_head_it_came_from_is_refused(pair, tmp_path):
    gguf = tmp_path / "head.gguf"
    gguf.write_bytes(b"GGUF")  # refused before anything reads it
    args = ["bench", "-t", pair["target"], "-d", gguf, "--engine", "llamacpp", "--compare", "-q"]
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    assert result.exit_code == 1 and "--reference-draft RAW" in result.output, result.output


@pytest.mark.parametrize("text", ["-n", "-m", "-ngl"])
def test_a_prompt_llama_simple_would_read_as_its_own_flag_is_refused(text, monkeypatch):
    """llama-simple takes its prompt as the arguments after its flags: a prompt that IS one of them would be parsed
    as an option (and the next argument as its value), not decoded."""
    from eagle_convert.engines.llamacpp import LlamaCppEngine

    engine = LlamaCppEngine(tools=LlamaCppTools(Path("bin"), None), target_gguf="t.gguf", vocab=None, k=3)
    with pytest.raises(EngineError, match="own flags"):
        engine._command(text, 4)
    assert engine._command("-x", 4)[-1] == "-x"  # control: any other leading dash is a prompt to llama-simple
