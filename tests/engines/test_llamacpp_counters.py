"""The llama.cpp counter parser (engines/llamacpp_log.py, which bench and support/llamacpp.py use) on
llama-speculative-simple's log format (b11434): every counter read, read as vLLM's counter keys, and a log cut short
before the counters (ggml-org/llama.cpp#22142) refused rather than read as 0."""

from __future__ import annotations

import pytest
from support.llamacpp import generated_text

from eagle_convert.engines.generation import stats_from_counters
from eagle_convert.engines.llamacpp_log import generated_bytes, parse_counters
from eagle_convert.errors import EngineError

LOG = """
main: EAGLE3 extract_layers = [2, 6, 9]
encoded    6 tokens in    0.010 seconds, speed:  600.000 t/s
decoded   33 tokens in    0.100 seconds, speed:  330.000 t/s

n_draft   = 3
n_predict = 33
n_drafted = 36
n_accept  = 21
accept    = 58.333%

draft:

statistics     draft-eagle3: #calls(b,g,a) =    1     12     12, #gen drafts =     12, #acc drafts =     9, \
#gen tokens =     36, #acc tokens =    21, #mean acc len = 2.75, #acc rate/pos = (0.750, 0.583, 0.417)
"""


def test_every_counter_is_read():
    c = parse_counters(LOG)
    assert (c.n_predict, c.n_drafted, c.n_accept, c.n_prompt) == (33, 36, 21, 6)
    assert (c.accept_calls, c.gen_drafts, c.acc_drafts, c.gen_tokens, c.acc_tokens) == (12, 12, 9, 36, 21)
    assert c.acc_rate_per_pos == (0.75, 0.583, 0.417)


def test_a_run_with_nothing_accepted_has_no_rates():
    log = LOG.replace("#acc tokens =    21, #mean acc len = 2.75, #acc rate/pos = (0.750, 0.583, 0.417)",
                      "#acc tokens =     0, #mean acc len = 1.00, #acc rate/pos = ()")
    assert parse_counters(log).acc_rate_per_pos == () and parse_counters(log).acc_tokens == 0


def test_the_counters_read_as_vllms_keys_give_the_acceptance_histogram():
    counters = parse_counters(LOG).as_counters(3)
    # 0.750 / 0.583 / 0.417 of 12 rounds: 9, 7, 5 accepted at positions 1..3 (= the 21 accepted)
    assert counters == {"num_drafts": 12, "num_draft_tokens": 36, "num_accepted_tokens": 21,
                        "num_accepted_tokens_per_pos": [9, 7, 5]}
    assert stats_from_counters(3, counters).histogram == (3, 2, 2, 5)


def test_rates_printed_for_fewer_positions_than_k_are_zero_beyond():
    log = LOG.replace("n_accept  = 21", "n_accept  = 9").replace("(0.750, 0.583, 0.417)", "(0.750)")
    assert parse_counters(log).accepted_per_pos(3) == [9, 0, 0]


def test_rates_that_do_not_add_up_to_the_accepted_total_are_refused():
    with pytest.raises(EngineError, match="do not add up"):
        parse_counters(LOG.replace("n_accept  = 21", "n_accept  = 22")).as_counters(3)


@pytest.mark.parametrize("cut", ["n_accept", "statistics"])
def test_a_log_cut_before_the_counters_is_refused(cut):
    with pytest.raises(EngineError, match=cut):
        parse_counters(LOG[:LOG.index(cut)])


def test_a_prompt_echoed_as_other_tokens_is_refused():
    out = b"\n\n<s> ab" + b"cd\n\n\n\n"
    assert generated_bytes(out, b"<s> ab", prefix=b"\n\n", suffix=b"\n\n\n\n", tool="t") == b"cd"
    with pytest.raises(EngineError, match="other tokens than the bench sent"):
        generated_bytes(out, b"<s>  ab", prefix=b"\n\n", suffix=b"\n\n\n\n", tool="t")


def test_the_text_after_the_prompt_is_the_generation():
    assert generated_text("\n\n<s> \u0101\u0102\u0103\u0104\u0105\n\n", "\u0101\u0102") == "\u0103\u0104\u0105"
    with pytest.raises(ValueError, match="not in the output"):
        generated_text("abc", "\u0101")
