"""The demo pair (DEMO_CONFIG: `eagle-convert demo`, the README's Python example) can show every README command: its
tokenizer reads the built-in prompts and long-context documents, its chat template has assistant turns SpecForge's
rule finds; and texts a tokenizer cannot read are reported, not silently benched as <unk>."""

from __future__ import annotations

import json
import warnings

import pytest
from click.testing import CliRunner

from eagle_convert.benchmark.chat import ChatTokenizer
from eagle_convert.benchmark.documents import builtin_documents
from eagle_convert.benchmark.prompts import BUILTIN_PROMPTS, PromptFileError
from eagle_convert.benchmark.session import open_session
from eagle_convert.benchmark.token_counts import TemplateMarkerError, assistant_markers
from eagle_convert.benchmark.unknown_tokens import UnknownTokensWarning, unknown_share, unknown_token_id
from eagle_convert.cli.main import main
from eagle_convert.testing.tiny import DEMO_CONFIG, TinyConfig, make_target

WORDS = TinyConfig(num_hidden_layers=1)  # the word-level tokenizer the tests' numbers were made with


@pytest.fixture(scope="module")
def targets(tmp_path_factory):
    root = tmp_path_factory.mktemp("demo-tokenizers")
    make_target(root / "demo", DEMO_CONFIG)
    make_target(root / "words", WORDS)
    return root


def texts():
    documents = builtin_documents()[0][:8]
    return [("prompt " + p.id, "\n".join(p.turns)) for p in BUILTIN_PROMPTS] + [(d.id, d.text) for d in documents]


def shares(folder) -> dict[str, float]:
    tok = ChatTokenizer.from_dir(folder).tokenizer
    unk = unknown_token_id(tok)
    return {name: unknown_share(tok.encode(text, add_special_tokens=False).ids, unk) for name, text in texts()}


def test_the_demo_tokenizer_reads_the_built_in_prompts_and_documents(targets):
    assert max(shares(targets / "demo").values()) < 0.02
    assert min(shares(targets / "words").values()) > 0.9  # control: the word-level one reads none of them


def test_the_demo_tokenizer_keeps_the_t_words_ids(targets):
    tok = ChatTokenizer.from_dir(targets / "demo").tokenizer
    assert tok.encode("t3 t10 t255 t500", add_special_tokens=False).ids == [3, 10, 255, 500]
    assert max(tok.get_vocab().values()) == DEMO_CONFIG.vocab_size - 1 and tok.get_vocab_size() == 512


def test_the_demo_target_takes_the_readmes_longest_context_bucket():
    # README: `bench --context-lengths 1k,2k,4k,8k` with the default 256 new tokens
    assert DEMO_CONFIG.hf_config()["max_position_embeddings"] >= 8000 + 256


def test_the_demo_template_has_the_assistant_turns_specforge_needs(targets):
    assert assistant_markers(ChatTokenizer.from_dir(targets / "demo")) == ("<|assistant|> ", "</s> ")
    with pytest.raises(TemplateMarkerError):  # control: the bare template has no assistant header
        assistant_markers(ChatTokenizer.from_dir(targets / "words"))


def test_vocab_map_build_compat_specforge_runs_on_the_demo_target(targets, tmp_path):
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "What is 2 + 2?"},
                                              {"role": "assistant", "content": "t20 t21 t20"}]}) + "\n")
    run = CliRunner().invoke(main, ["vocab-map", "build", "-t", str(targets / "demo"), "--prompts", str(chats),
                                    "-n", "4", "--compat", "specforge", "-o", str(tmp_path / "maps"), "--cache-dir",
                                    str(tmp_path / "cache"), "--json", "-q"])
    assert run.exit_code == 0, run.output
    counts = json.loads(run.stdout)["counts"]
    # only the assistant span after its header counts (SpecForge's mask): t20 t21 t20 and the closing </s>
    assert (counts["tokens"], counts["distinct"]) == (4, 3)


# ---- the <unk> warning ---------------------------------------------------------------------------------------------

def test_prompts_a_tokenizer_cannot_read_are_warned_about(targets):
    with pytest.warns(UnknownTokensWarning, match=r"8 of 8 prompts are mostly .*'<unk>' \('writing'"):
        open_session(targets / "words", None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownTokensWarning)
        open_session(targets / "demo", None)  # the same prompts, read: no warning
        open_session(targets / "words", ["t10 t11 t12"])  # words it has: no warning


def test_a_prompt_half_unknown_is_not_mostly_unknown(targets):
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnknownTokensWarning)
        open_session(targets / "words", ["t10 t11 zz qq"])  # exactly half: the bound is "more than half"
    with pytest.warns(UnknownTokensWarning, match="1 of 2 prompts"):
        open_session(targets / "words", ["t10 t11 zz qq", "t10 zz qq"])


def test_the_cli_shows_it_as_a_warning_paragraph_for_documents_and_corpora(targets, tmp_path):
    docs = tmp_path / "docs.jsonl"
    docs.write_text(json.dumps({"id": "prose", "text": "words the tokenizer lacks " * 40}) + "\n")
    bench = CliRunner().invoke(main, ["bench", "-t", str(targets / "words"), "-d", str(targets / "words"),
                                      "--context-lengths", "10", "--documents", str(docs), "--documents-per-bucket",
                                      "1", "-q"])
    flat = " ".join(bench.stderr.split())
    assert "warning: 1 of 1 documents are mostly the tokenizer's unknown token '<unk>' ('prose')" in flat
    chats = tmp_path / "chats.jsonl"
    chats.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": "an answer in prose"}]}) + "\n")
    build = CliRunner().invoke(main, ["vocab-map", "build", "-t", str(targets / "words"), "--prompts", str(chats),
                                      "-n", "2", "--compat", "modelopt", "-o", str(tmp_path / "maps"), "--cache-dir",
                                      str(tmp_path / "cache"), "-q"])
    assert build.exit_code == 0, build.output
    assert f"tokens counted in {chats} are the tokenizer's unknown token '<unk>'" in " ".join(build.stderr.split())


def test_a_python_callers_dict_prompt_is_read_as_a_prompts_file_line(targets):
    # the README's example passes {"prompt": ...}: its text is the prompt, not the dict's repr
    session = open_session(targets / "words", [{"prompt": "t10 t11 t12"}, {"turns": ["t5", "t6"]}, "t7"])
    assert [p.turns for p in session.prompts] == [("t10 t11 t12",), ("t5", "t6"), ("t7",)]
    with pytest.raises(PromptFileError, match=r"prompts\[0\] is not a prompt"):
        open_session(targets / "words", [{"text": "t10"}])
