"""Counting a corpus the producers' way (benchmark/token_counts.py), against the producers' own masking code run
on the same tiny chat corpus: SpecForge's GeneralParser (render, truncate, regex loss mask) and speculators'
`_render_boundary_rows` (a row per assistant turn), both fed transformers' tokenizer and apply_chat_template, the
reference for the rendered text. Then the cache: a second count for any N reads nothing but the corpus's digest."""

from __future__ import annotations

import json
from collections import Counter

import pytest
import torch
from support.producers import producer_function, specforge_parser_module, speculators_boundary_rows

from eagle_convert.benchmark.chat import ChatTokenizer
from eagle_convert.benchmark.token_counts import CountSettings, count_tokens, read_conversations
from eagle_convert.testing.tiny import TinyConfig, make_target
from eagle_convert.vocab.selection import select

# Role markers are words of the tiny word-level tokenizer: t3 user, t4 assistant (the generation prompt), t6 system,
# t5 end of turn. Content words are t10 and above.
TEMPLATE = ("{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}t3 {{ m['content'] }} t5 "
            "{% elif m['role'] == 'system' %}t6 {{ m['content'] }} t5 {% else %}t4 {{ m['content'] }} t5 {% endif %}"
            "{% endfor %}{% if add_generation_prompt %}t4 {% endif %}")


def _words(*ids: int) -> str:
    return " ".join(f"t{i}" for i in ids)


CORPUS = [
    {"conversations": [{"from": "human", "value": _words(10, 11)}, {"from": "gpt", "value": _words(20, 21, 20)},
                       {"from": "human", "value": _words(12)}, {"from": "gpt", "value": _words(22, 20, 23)}]},
    {"messages": [{"role": "system", "content": _words(13)}, {"role": "user", "content": _words(14)},
                  {"role": "assistant", "content": _words(24, 21, 25, 26)}]},
    {"turns": [_words(15, 16)]},  # prompt-only: nothing under a loss mask
    {"messages": [{"role": "user", "content": _words(17)},
                  {"role": "assistant", "content": _words(*range(30, 60), 21, 20)}]},  # long: past max_length 24
    {"conversations": [{"from": "gpt", "value": _words(90)}, {"from": "human", "value": _words(18)},
                       {"from": "gpt", "value": _words(27, 27, 28)}]},  # leading assistant message
]
MAX_LENGTH = 24


@pytest.fixture()
def chat_target(tmp_path):
    target = tmp_path / "target"
    make_target(target, TinyConfig(vocab_size=128))
    config = json.loads((target / "tokenizer_config.json").read_text())
    (target / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": TEMPLATE}))
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(row) + "\n" for row in CORPUS))
    return target, corpus


def _hf(target):
    from transformers import AutoTokenizer
    return AutoTokenizer.from_pretrained(str(target))


def _count_rows(rows) -> Counter:
    # the producers' counting loop (SpecForge generate_vocab_mapping_file, speculators save_token_frequency_...)
    counter = Counter()
    for input_ids, loss_mask in rows:
        unique_ids, counts = input_ids[loss_mask == 1].unique(return_counts=True)
        counter.update(dict(zip(unique_ids.tolist(), counts.tolist())))
    return counter


def test_renderer_matches_transformers_on_the_corpus(chat_target):
    target, corpus = chat_target
    chat, hf = ChatTokenizer.from_dir(target), _hf(target)
    for messages in read_conversations(corpus):
        for prompt in (False, True):
            assert chat.render(messages, prompt) == hf.apply_chat_template(messages, tokenize=False,
                                                                           add_generation_prompt=prompt)


def test_specforge_counts_equal_specforge_parser(chat_target, tmp_path):
    target, corpus = chat_target
    parse = specforge_parser_module()
    template = parse.ChatTemplate(assistant_header="t4 ", user_header="t3 ", end_of_turn_token=" t5 ")
    parser = parse.GeneralParser(_hf(target), template)
    theirs = _count_rows(parser.parse(row.get("conversations") or row.get("messages") or
                                      [{"role": "user", "content": t} for t in row["turns"]], MAX_LENGTH)
                         for row in CORPUS)
    result = count_tokens(target, corpus, CountSettings("specforge", MAX_LENGTH, tmp_path / "cache", False))
    assert list(result.counts.counts.items()) == list(theirs.items())  # values and first-seen order
    assert 90 not in result.counts.counts and result.prompt_only_rows == 1
    for n in (3, 5, 8, 40):  # ties at the cut-off (counts of 1 and 2 abound); 40 > distinct tokens: padding
        d2t, t2d = producer_function("process_token_dict_to_mappings")(Counter(theirs), n, 128)
        ours = select(result.counts, n, 128, "specforge")
        assert torch.equal(ours.d2t(), d2t) and torch.equal(ours.t2d(), t2d)


def test_speculators_counts_equal_speculators_rows(chat_target, tmp_path):
    target, corpus = chat_target
    hf = _hf(target)

    def encode_render(conv, endpoint, *, add_generation_prompt, max_length, tools=None):
        # vLLM's /render: the template applied, tokenized without added specials, truncated on the right
        text = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=add_generation_prompt)
        return hf(text, add_special_tokens=False)["input_ids"][:max_length]

    boundary_rows = speculators_boundary_rows(encode_render)
    rows = [row for messages in read_conversations(corpus) for row in boundary_rows(messages, "", MAX_LENGTH)]
    theirs = _count_rows((torch.tensor(r["input_ids"]), torch.tensor(r["loss_mask"])) for r in rows)
    result = count_tokens(target, corpus, CountSettings("speculators", MAX_LENGTH, tmp_path / "cache", False))
    assert result.counts.counts == dict(theirs) and result.counts.samples == len(rows) == 5
    assert result.counts.counts[5] == 4  # each row's end-of-turn (t5), but the truncated long answer's
    for n in (3, 6, 40):
        d2t, t2d = producer_function("build_vocab_mappings_from_distribution")(dict(theirs), n, 128)
        ours = select(result.counts, n, 128, "speculators")
        assert torch.equal(ours.d2t(), d2t) and torch.equal(ours.t2d(), t2d)


def test_length_rules_truncate_or_drop(chat_target, tmp_path):
    target, corpus = chat_target
    truncated = count_tokens(target, corpus, CountSettings("specforge", MAX_LENGTH, tmp_path / "c", False)).counts
    dropped = count_tokens(target, corpus, CountSettings("eagle", MAX_LENGTH, tmp_path / "c", False)).counts
    assert 30 in truncated.counts and 59 not in truncated.counts  # the long answer cut at max_length
    assert 30 not in dropped.counts and dropped.skipped == 1  # the EAGLE reference drops the whole sample


def test_modelopt_counts_every_template_token_in_one_render(chat_target, tmp_path):
    target, corpus = chat_target
    flat = [m for messages in read_conversations(corpus) for m in messages]
    hf = _hf(target)
    theirs = Counter(hf(hf.apply_chat_template(flat, tokenize=False), add_special_tokens=False)["input_ids"])
    result = count_tokens(target, corpus, CountSettings("modelopt", MAX_LENGTH, tmp_path / "cache", False))
    assert list(result.counts.counts.items()) == list(theirs.items())
    assert result.counts.counts[1] == 1  # one BOS: one render of all conversations, not one per conversation
    assert select(result.counts, 4, 128, "modelopt").target_ids == tuple(i for i, _ in theirs.most_common(4))


def test_counts_are_cached_per_corpus_target_compat_and_length(chat_target, tmp_path):
    target, corpus = chat_target
    settings = CountSettings("specforge", MAX_LENGTH, tmp_path / "cache", False)
    first, second = count_tokens(target, corpus, settings), count_tokens(target, corpus, settings)
    assert not first.cache_used and second.cache_used and second.counts.counts == first.counts.counts
    assert list(second.counts.counts) == list(first.counts.counts) and second.prompt_only_rows == 1
    other_length = CountSettings("specforge", MAX_LENGTH + 1, tmp_path / "cache", False)
    assert not count_tokens(target, corpus, other_length).cache_used
    assert not count_tokens(target, corpus, CountSettings("eagle", MAX_LENGTH, tmp_path / "cache", False)).cache_used
    corpus.write_text(corpus.read_text() + json.dumps({"prompt": "t19"}) + "\n")
    assert not count_tokens(target, corpus, settings).cache_used  # another corpus: counted again
