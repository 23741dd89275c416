"""The llama.cpp counter parser (support/llamacpp.py) on llama-speculative-simple's log format (b11434): every
counter read, and a log cut short before the counters (ggml-org/llama.cpp#22142) refused rather than read as 0."""

from __future__ import annotations

import pytest
from support.llamacpp import generated_text, parse_counters

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
    assert (c.n_predict, c.n_drafted, c.n_accept) == (33, 36, 21)
    assert (c.accept_calls, c.gen_drafts, c.acc_drafts, c.gen_tokens, c.acc_tokens) == (12, 12, 9, 36, 21)
    assert c.acc_rate_per_pos == (0.75, 0.583, 0.417)


def test_a_run_with_nothing_accepted_has_no_rates():
    log = LOG.replace("#acc tokens =    21, #mean acc len = 2.75, #acc rate/pos = (0.750, 0.583, 0.417)",
                      "#acc tokens =     0, #mean acc len = 1.00, #acc rate/pos = ()")
    assert parse_counters(log).acc_rate_per_pos == () and parse_counters(log).acc_tokens == 0


@pytest.mark.parametrize("cut", ["n_accept", "statistics"])
def test_a_log_cut_before_the_counters_is_refused(cut):
    with pytest.raises(ValueError, match=cut):
        parse_counters(LOG[:LOG.index(cut)])


def test_the_text_after_the_prompt_is_the_generation():
    assert generated_text("\n\n<s> \u0101\u0102\u0103\u0104\u0105\n\n", "\u0101\u0102") == "\u0103\u0104\u0105"
    with pytest.raises(ValueError, match="not in the output"):
        generated_text("abc", "\u0101")
