"""One text reader for every file a user hands in (io/text.py): strict UTF-8, a UTF-8 byte-order mark dropped,
UTF-16/32 and other encodings refused in one paragraph naming the file, the byte offset and line and what to do, on
every command that reads prompts, documents or a corpus. Also the refusals whose words used to mislead: a row whose
"conversations" is not a list, and a --context-lengths bucket longer than the target holds."""

from __future__ import annotations

import codecs
import json

import pytest
from click.testing import CliRunner
from safetensors.torch import load_file

from eagle_convert.benchmark.context import ContextLengthsError, check_buckets_fit
from eagle_convert.benchmark.prompts import PromptFileError, load_prompts
from eagle_convert.benchmark.token_counts import read_conversations
from eagle_convert.cli.main import main
from eagle_convert.io.text import TextEncodingError, read_text, text_lines
from eagle_convert.testing.tiny import TinyConfig, make_eagle1_head, make_target

PROMPT = '{"prompt": "t10 t11"}\n'


def test_utf8_lines_bom_dropped_crlf_and_u2028_kept_inside_a_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(codecs.BOM_UTF8 + b'{"a": 1}\r\n\n' + '{"b": "x\u2028y"}\n'.encode())
    assert list(text_lines(path)) == [(1, '{"a": 1}'), (2, ""), (3, '{"b": "x\u2028y"}')]
    assert [json.loads(line) for _, line in text_lines(path) if line] == [{"a": 1}, {"b": "x\u2028y"}]
    assert read_text(path) == '{"a": 1}\r\n\n{"b": "x\u2028y"}\n'  # whole: the mark dropped, nothing else changed


@pytest.mark.parametrize("mark, encoding, named", [(b"", "utf-16", "UTF-16"),
                                                  (codecs.BOM_UTF16_BE, "utf-16-be", "UTF-16"),
                                                  (b"", "utf-32", "UTF-32")])
def test_a_foreign_byte_order_mark_is_refused_by_name(tmp_path, mark, encoding, named):
    path = tmp_path / "p.jsonl"
    path.write_bytes(mark + PROMPT.encode(encoding))  # Python's utf-16 / utf-32 write their own mark
    for read in (lambda: list(text_lines(path)), lambda: read_text(path)):
        with pytest.raises(TextEncodingError) as caught:
            read()
        error = caught.value
        assert f"{path} is not UTF-8 text" in error.message and f"the {named} byte-order mark" in error.message
        assert "at byte 0 (line 1)" in error.message  # UTF-32-LE's mark starts with UTF-16-LE's: named right
        assert f"iconv -f {named} -t UTF-8 {path}" in error.hint


def test_a_bad_byte_is_refused_at_its_offset_and_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_bytes(PROMPT.encode() + b'{"prompt": "caf\xe9"}\n')  # latin-1 after a good line
    with pytest.raises(TextEncodingError) as caught:
        list(text_lines(path))
    assert "invalid UTF-8 (e9) at byte 37 (line 2)" in caught.value.message, caught.value.message
    assert "ENCODING being the file's own" in caught.value.hint
    with pytest.raises(TextEncodingError, match=r"at byte 37 \(line 2\)"):
        read_text(path)
    (tmp_path / "q.jsonl").write_bytes(PROMPT.encode("utf-16-le"))  # no mark: NUL bytes give it away
    with pytest.raises(TextEncodingError, match=r"a NUL byte .* at byte 1 \(line 1\)"):
        list(text_lines(tmp_path / "q.jsonl"))


def test_readers_use_it_and_good_files_still_read(tmp_path):
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_bytes(codecs.BOM_UTF8 + PROMPT.encode())
    bad.write_bytes(PROMPT.encode("utf-16"))
    assert [p.turns for p in load_prompts(good)] == [("t10 t11",)]
    assert read_conversations(good) == [[{"role": "user", "content": "t10 t11"}]]
    for read in (load_prompts, read_conversations):
        with pytest.raises(TextEncodingError):
            read(bad)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("text")
    cfg = TinyConfig(vocab_size=128, num_hidden_layers=1)
    make_target(root / "target", cfg)
    make_eagle1_head(root / "head", cfg, load_file(root / "target" / "model.safetensors"), agree=True,
                     fc_bias=False)
    (root / "u16.jsonl").write_bytes(PROMPT.encode("utf-16"))
    (root / "d16.jsonl").write_bytes('{"id": "d", "text": "t10 t11"}\n'.encode("utf-16"))
    return root


def _run(*args):
    return CliRunner().invoke(main, list(map(str, args)))


def test_every_command_refuses_a_utf16_file_in_one_paragraph(tiny, tmp_path):
    target, head, u16 = tiny / "target", tiny / "head", tiny / "u16.jsonl"
    runs = {
        "bench --prompts": _run("bench", "--target", target, "--draft", head, "--prompts", u16, "--device", "cpu"),
        "bench --documents": _run("bench", "--target", target, "--draft", head, "--documents", tiny / "d16.jsonl",
                                  "--context-lengths", "64", "--max-new-tokens", 4, "--device", "cpu"),
        "vocab-map build": _run("vocab-map", "build", "-t", target, "--prompts", u16, "-n", 4, "--compat",
                                "modelopt", "-o", tmp_path / "maps", "--cache-dir", tmp_path / "cache"),
        "vocab-map coverage": _run("vocab-map", "coverage", "-t", target, "--prompts", u16, "-n", 4, "--compat",
                                   "modelopt", "--cache-dir", tmp_path / "cache"),
    }
    for command, result in runs.items():
        said = " ".join(result.output.split())  # one paragraph, wrapped
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), (command, result.output)
        assert said.startswith(f"error: {u16 if 'documents' not in command else tiny / 'd16.jsonl'} is not UTF-8 "
                               "text: it starts with the UTF-16 byte-order mark ff fe at byte 0"), (command, said)
        assert "iconv -f UTF-16 -t UTF-8" in said and "chat template" not in said, command
    assert not (tmp_path / "maps").exists()


def test_a_conversation_that_is_not_a_list_says_so(tmp_path):
    path = tmp_path / "c.jsonl"
    for row, said in [({"conversations": 5}, '"conversations" is a JSON int; it must be a list of turns'),
                      ({"messages": [5]}, "a turn is a JSON int; each turn must be an object"),
                      ({"text": "x"}, "no \"turns\" or \"prompt\" key (keys: 'text')")]:
        path.write_text(json.dumps(row) + "\n")
        with pytest.raises(PromptFileError) as caught:
            read_conversations(path)
        assert f"line 1: not a conversation ({said}" in caught.value.message, caught.value.message
        assert '{"conversations": [{"from": "human"' in caught.value.hint
    path.write_text('{"conversations": [{"from": "human", "value": "t10"}]}\n')  # control: a list is read
    assert read_conversations(path) == [[{"role": "user", "content": "t10"}]]
    path.write_text("[1, 2]\n")
    with pytest.raises(PromptFileError, match="not a prompt .the line is a JSON list, not an object"):
        load_prompts(path)


def test_a_bucket_past_the_targets_positions_names_the_limit_and_the_buckets_that_fit(tiny):
    with pytest.raises(ContextLengthsError) as caught:
        check_buckets_fit((1000, 2000, 40_000), 256, 4096)
    error = caught.value
    assert "--context-lengths 40k: the target holds 4096 positions" in error.message
    assert "at most 3840 tokens fit; longer documents cannot change that" in error.message
    assert error.hint.startswith("Keep the buckets that fit (--context-lengths 1k,2k)")
    check_buckets_fit((1000, 3840), 256, 4096)  # control: exactly full fits, as prompts.check_prompt_fits says
    check_buckets_fit((40_000,), 256, None)  # no stated limit: nothing to refuse
    result = _run("bench", "--target", tiny / "target", "--draft", tiny / "head", "--context-lengths", "1k,40k",
                  "--device", "cpu")
    said = " ".join(result.output.split())
    assert result.exit_code == 1 and "the target holds 4096 positions" in said, said
    assert "Keep the buckets that fit (--context-lengths 1k)" in said and "Give longer documents" not in said
