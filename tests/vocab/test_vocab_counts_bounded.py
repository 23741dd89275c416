"""Counting long conversations with bounded tokenizing (benchmark/token_head.py) gives the producers' own counts:
SpecForge's GeneralParser and speculators' `_render_boundary_rows`, fed transformers' tokenizer (which encodes every
text whole), on rows far past --max-length, with a byte-level BPE where a cut inside a word changes merges. The
limits sweep the window's end across turn headers, end-of-turn markers and words, and the maps stay tensor-equal."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from support.bpe_target import EncodeSpy, make_bpe_target, sample_text
from support.producers import producer_function, specforge_parser_module, speculators_boundary_rows

from eagle_convert.benchmark import token_head
from eagle_convert.benchmark.chat import ChatTokenizer
from eagle_convert.benchmark.token_counts import CountSettings, count_corpus
from eagle_convert.vocab.selection import select

LIMITS = (*range(40, 50), 257, 1000)  # 40-49: the window ends at every token of the first turns' markers and words
VOCAB = 700


def _conversation(rng: random.Random, turns: int, words: tuple[int, int]) -> list[dict]:
    return [{"role": role, "content": sample_text(rng, rng.randint(*words))}
            for _ in range(turns) for role in ("user", "assistant")]


@pytest.fixture(scope="module")
def long_corpus(tmp_path_factory):
    rng = random.Random(11)
    rows = [_conversation(rng, 1, (1500, 1500)),  # one long answer: cut inside it
            _conversation(rng, 30, (5, 40)),  # many short turns: most spans lie past the window
            _conversation(rng, 3, (300, 400)),  # a context that alone fills the window: speculators skips the turn
            _conversation(rng, 1, (3, 6))]  # short: encoded whole
    target = make_bpe_target(tmp_path_factory.mktemp("bpe"))
    from transformers import AutoTokenizer
    return ChatTokenizer.from_dir(target), AutoTokenizer.from_pretrained(str(target)), rows


def _count_rows(rows) -> Counter:
    counter = Counter()  # the producers' counting loop, as in test_vocab_counts.py
    for input_ids, loss_mask in rows:
        unique_ids, counts = input_ids[loss_mask == 1].unique(return_counts=True)
        counter.update(dict(zip(unique_ids.tolist(), counts.tolist())))
    return counter


def test_specforge_counts_equal_its_parser_past_the_window(long_corpus):
    chat, hf, rows = long_corpus
    parse = specforge_parser_module()
    template = parse.ChatTemplate(assistant_header="<|im_start|>assistant\n", user_header="<|im_start|>user\n",
                                  end_of_turn_token="<|im_end|>\n")
    parser = parse.GeneralParser(hf, template)
    for limit in LIMITS:
        theirs = _count_rows(parser.parse(messages, limit) for messages in rows)
        ours, _ = count_corpus(chat, rows, CountSettings("specforge", limit, progress=False))
        assert list(ours.counts.items()) == list(theirs.items()), limit  # values and first-seen order
        for n in (8, 40):
            d2t, t2d = producer_function("process_token_dict_to_mappings")(Counter(theirs), n, VOCAB)
            mapping = select(ours, n, VOCAB, "specforge")
            assert torch.equal(mapping.d2t(), d2t) and torch.equal(mapping.t2d(), t2d)


def test_speculators_counts_equal_its_rows_past_the_window(long_corpus):
    chat, hf, rows = long_corpus

    def encode_render(conv, endpoint, *, add_generation_prompt, max_length, tools=None):
        text = hf.apply_chat_template(conv, tokenize=False, add_generation_prompt=add_generation_prompt)
        return hf(text, add_special_tokens=False)["input_ids"][:max_length]  # vLLM's /render: whole, then cut

    boundary_rows = speculators_boundary_rows(encode_render)
    skipped_a_turn = False
    for limit in LIMITS:
        produced = [row for messages in rows for row in boundary_rows(messages, "", limit)]
        theirs = _count_rows((torch.tensor(r["input_ids"]), torch.tensor(r["loss_mask"])) for r in produced)
        ours, _ = count_corpus(chat, rows, CountSettings("speculators", limit, progress=False))
        assert ours.counts == dict(theirs) and ours.samples == len(produced), limit
        skipped_a_turn |= len(produced) < sum(1 for messages in rows for m in messages if m["role"] == "assistant")
        for n in (8, 40):
            d2t, t2d = producer_function("build_vocab_mappings_from_distribution")(dict(theirs), n, VOCAB)
            mapping = select(ours, n, VOCAB, "speculators")
            assert torch.equal(mapping.d2t(), d2t) and torch.equal(mapping.t2d(), t2d)
    assert skipped_a_turn  # the "context fills the window" rule was exercised


def test_eagle_drops_exactly_the_rows_longer_than_the_window(long_corpus):
    chat, _, rows = long_corpus
    lengths = [len(chat.tokenizer.encode(chat.render(m, add_generation_prompt=False), add_special_tokens=False))
               for m in rows]
    for limit in (*LIMITS, min(lengths), max(lengths) - 1, max(lengths)):
        ours, _ = count_corpus(chat, rows, CountSettings("eagle", limit, progress=False))
        assert ours.skipped == sum(n > limit for n in lengths) and ours.samples == len(rows) - ours.skipped



def test_modelopt_counts_equal_the_whole_render_in_windows(long_corpus, monkeypatch):
    chat, hf, rows = long_corpus
    flat = [m for messages in rows for m in messages]
    theirs = Counter(hf(hf.apply_chat_template(flat, tokenize=False), add_special_tokens=False)["input_ids"])
    for window in (token_head.AGREE + 1, 100, 257, 1000):
        monkeypatch.setattr(token_head, "WINDOW_TOKENS", window)
        ours, _ = count_corpus(chat, rows, CountSettings("modelopt", 2048, progress=False))
        assert list(ours.counts.items()) == list(theirs.items()), window  # values and first-seen (stream) order
        assert (ours.samples, ours.tokens) == (1, sum(theirs.values()))
        mapping = select(ours, 40, VOCAB, "modelopt")
        assert mapping.target_ids == tuple(i for i, _ in theirs.most_common(40))


@pytest.mark.parametrize("compat", ["specforge", "speculators", "eagle", "nemo", "modelopt"])
def test_a_long_conversation_is_never_encoded_whole(long_corpus, compat, monkeypatch):
    chat, _, rows = long_corpus
    spy, limit = EncodeSpy(chat.tokenizer), 64
    monkeypatch.setattr(token_head, "WINDOW_TOKENS", 2 * limit)  # ModelOpt keeps every token: windows instead
    longest = max(len(chat.render(m, add_generation_prompt=False)) for m in rows)
    count_corpus(ChatTokenizer(spy, chat.chat_template, chat.special_tokens), rows, CountSettings(compat, limit,
                                                                                                  progress=False))
    bound = token_head.FIRST_CUT_CHARS_PER_TOKEN * (limit + token_head.MARGIN) * 9 // 4  # two growth steps of 1.5
    assert max(spy.lengths) <= bound < longest // 10
