"""A prompt or document far longer than the target takes is never encoded whole (issue 29, point 3): `bench` and
`vocab-map coverage` refuse a prompt past the target's max_position_embeddings from a bounded head
(prompts.encode_fitting), and `bench --context-lengths` encodes only the start of a document a bucket can keep. What
fits is encoded token for token as before (the whole text's encoding), with a byte-level BPE trained here where a cut
inside a word changes merges."""

from __future__ import annotations

import dataclasses
import json
import random

import pytest
from support.bpe_target import make_bpe_target, sample_text

from eagle_convert.benchmark import context, stream, token_head
from eagle_convert.benchmark.chat import ChatTokenizer
from eagle_convert.benchmark.documents import Document
from eagle_convert.benchmark.prompts import Prompt
from eagle_convert.benchmark.session import Session
from eagle_convert.errors import PromptTooLongError
from eagle_convert.settings.bench import ContextSettings

LIMIT = 300
BOUND = token_head.FIRST_CUT_CHARS_PER_TOKEN * (LIMIT + token_head.MARGIN) * 9 // 4  # two growth steps of 1.5


class _Spy:
    """The tokenizer, recording the characters of every text it is asked to encode."""

    def __init__(self, tokenizer):
        self.tokenizer, self.lengths = tokenizer, []

    def encode(self, text, add_special_tokens=True):
        self.lengths.append(len(text))
        return self.tokenizer.encode(text, add_special_tokens=add_special_tokens)

    def __getattr__(self, name):  # model, token_to_id, ...: the unknown-token check reads them
        return getattr(self.tokenizer, name)


@pytest.fixture(scope="module")
def bpe_dir(tmp_path_factory):
    return make_bpe_target(tmp_path_factory.mktemp("bpe"))


def _spied(bpe_dir) -> tuple[ChatTokenizer, _Spy]:
    chat = ChatTokenizer.from_dir(bpe_dir)
    spy = _Spy(chat.tokenizer)
    return dataclasses.replace(chat, tokenizer=spy), spy


def _session(chat: ChatTokenizer, use_template: bool, prompts: list[Prompt]) -> Session:
    return Session("bpe", prompts, chat, use_template, (), max_positions=LIMIT)


@pytest.mark.parametrize("use_template", [True, False])
def test_a_prompt_past_the_targets_positions_is_refused_from_a_bounded_head(bpe_dir, use_template):
    chat, spy = _spied(bpe_dir)
    text = sample_text(random.Random(1), 50_000)  # ~290k characters, ~60k tokens
    prompt = Prompt("huge", (text,))
    with pytest.raises(PromptTooLongError, match=rf"'huge' is more than {LIMIT} tokens long .*shorten the prompt"):
        _session(chat, use_template, [prompt]).check_first_turns(16)
    assert max(spy.lengths) <= BOUND < len(text) // 50  # a few prefixes of the limit's size, never the text


@pytest.mark.parametrize("use_template", [True, False])
def test_prompts_that_fit_are_encoded_as_the_whole_text_is(bpe_dir, use_template):
    chat = ChatTokenizer.from_dir(bpe_dir)
    rng, max_new = random.Random(2), 8
    prompts = [Prompt(f"p{words}", (sample_text(rng, words),)) for words in (1, 5, 40, 120, 200, 260, 400)]
    session = _session(chat, use_template, prompts)
    fitted = refused = 0
    for prompt in prompts:
        messages = [{"role": "user", "content": prompt.turns[0]}]
        whole = session.encode(messages, prompt)  # the whole text's encoding, as before
        if len(whole) + max_new <= LIMIT:
            assert session.encode_turn(messages, prompt, max_new) == whole, prompt.id
            fitted += 1
        else:  # refused whatever the path; counted exactly while it is within the limit
            with pytest.raises(PromptTooLongError) as refusal:
                session.encode_turn(messages, prompt, max_new)
            exact = f"is {len(whole)} tokens long" in str(refusal.value)
            assert exact == (len(whole) <= LIMIT), prompt.id  # this BPE adds no special tokens to a plain text
            refused += 1
    assert fitted >= 4 and refused >= 2  # both sides of the limit were exercised


def test_coverage_refuses_a_prompt_past_the_targets_positions_before_loading_it(bpe_dir, tmp_path, monkeypatch):
    chat, spy = _spied(bpe_dir)
    monkeypatch.setattr(stream.ChatTokenizer, "from_dir", lambda folder: chat)
    monkeypatch.setattr(stream, "local_checkpoint", lambda folder: None)
    monkeypatch.setattr(stream, "runner_target", lambda ckpt: type("View", (), {"config": {
        "max_position_embeddings": LIMIT}}))
    monkeypatch.setattr(stream, "load_target", lambda *a, **k: pytest.fail("the target was loaded"))
    text = sample_text(random.Random(3), 50_000)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in ("short", text)))
    with pytest.raises(PromptTooLongError, match=rf"'row 2' is more than {LIMIT} tokens long"):
        stream.greedy_stream(bpe_dir, rows, 16)
    assert max(spy.lengths) <= BOUND < len(text) // 50


def test_a_long_document_is_encoded_only_as_far_as_the_longest_bucket(bpe_dir, monkeypatch):
    chat, spy = _spied(bpe_dir)
    monkeypatch.setattr(context.ChatTokenizer, "from_dir", lambda folder: chat)
    documents = [Document(f"d{n}", sample_text(random.Random(10 + n), 50_000)) for n in range(2)]
    lengths = (128, 200, LIMIT)
    prompts, used_template = context.bucket_prompts(bpe_dir, documents, ContextSettings(lengths, per_bucket=2))
    assert used_template and max(spy.lengths) <= BOUND < len(documents[0].text) // 50
    plain = ChatTokenizer.from_dir(bpe_dir)
    for prompt in prompts:  # equal to the whole document's encoding cut to the bucket
        bucket, doc_id = prompt.id.split("/")
        doc = next(d for d in documents if d.id == doc_id)
        before, after = context._frame(plain, True, doc.question)
        room = lengths[[context.bucket_label(n) for n in lengths].index(bucket)] - len(before) - len(after)
        whole = plain.tokenizer.encode(doc.text, add_special_tokens=False).ids
        assert list(prompt.token_ids) == before + whole[:room] + after and len(prompt.token_ids) <= LIMIT
