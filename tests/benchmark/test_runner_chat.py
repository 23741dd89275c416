"""Chat templates rendered and tokenized exactly as transformers' apply_chat_template does, and EOS ids."""

from __future__ import annotations

import json
import shutil

import jinja2
import pytest
from support.golden_sets import GOLDEN

from eagle_convert.benchmark.chat import ChatTokenizer, load_chat_template, load_eos_token_ids

transformers = pytest.importorskip("transformers")
TOKENIZER_JSON = GOLDEN / "eagle1-llama2" / "target" / "tokenizer.json"

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = '<|start_header_id|>' + "
    "message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}"
)
# Multi-line: only renders right with trim_blocks + lstrip_blocks; uses loopcontrols, `tools is not none`, tojson and
# the {% generation %} tag.
CHATML = """{%- for message in messages %}
    {%- if message.role == 'system' and not loop.first %}
        {%- continue %}
    {%- endif %}
  {% if message.role == "assistant" %}
<|im_start|>assistant
{% generation %}{{ message.content }}{% endgeneration %}<|im_end|>
  {% else %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
  {% endif %}
{%- endfor %}
{%- if tools is not none %}TOOLS{% endif %}
{% if messages[0].meta is defined %}{{ messages[0].meta | tojson }}{% endif %}
{% if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""

CONVERSATION = [
    {"role": "system", "content": "t3 t4", "meta": {"note": "<b>&é"}},
    {"role": "user", "content": " t5 t6 t7 "},
    {"role": "assistant", "content": "t8 t9"},
    {"role": "user", "content": "t10 t11"},
]


def make_tokenizer_dir(tmp_path, template, *, as_file=False, config_extra=None):
    shutil.copy(TOKENIZER_JSON, tmp_path / "tokenizer.json")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>",
              "eos_token": {"__type": "AddedToken", "content": "</s>", "lstrip": False, "normalized": False,
                            "rstrip": False, "single_word": False, "special": True},
              "unk_token": "<unk>", **(config_extra or {})}
    if as_file:
        (tmp_path / "chat_template.jinja").write_text(template)
    else:
        config["chat_template"] = template
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    return tmp_path


@pytest.mark.parametrize("template_name, messages", [
    ("llama3", CONVERSATION[1:]), ("mistral", CONVERSATION[1:]), ("chatml", CONVERSATION),
    ("chatml", [{"role": "user", "content": "t1"}])])
@pytest.mark.parametrize("add_generation_prompt", [True, False])
@pytest.mark.parametrize("as_file", [False, True])
def test_render_and_tokens_match_transformers(tmp_path, template_name, messages, add_generation_prompt, as_file):
    template = {"llama3": LLAMA3, "mistral": MISTRAL, "chatml": CHATML}[template_name]
    model_dir = make_tokenizer_dir(tmp_path, template, as_file=as_file)
    ours = ChatTokenizer.from_dir(model_dir)
    theirs = transformers.AutoTokenizer.from_pretrained(model_dir)
    expected_text = theirs.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    assert ours.render(messages, add_generation_prompt) == expected_text
    expected_ids = theirs(expected_text, add_special_tokens=False)["input_ids"]
    assert ours.encode_chat(messages, add_generation_prompt) == expected_ids
    if template_name != "chatml":
        assert expected_ids[0] == 1  # the template's bos_token variable really was filled in


def test_raise_exception_reaches_the_caller(tmp_path):
    ours = ChatTokenizer.from_dir(make_tokenizer_dir(tmp_path, MISTRAL))
    with pytest.raises(jinja2.TemplateError, match="alternate"):
        ours.render([{"role": "assistant", "content": "t1"}])


def test_chat_template_jinja_wins_and_named_templates(tmp_path):
    make_tokenizer_dir(tmp_path, [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "D"}])
    assert load_chat_template(tmp_path) == "D"
    (tmp_path / "chat_template.jinja").write_text("FILE")
    assert load_chat_template(tmp_path) == "FILE"


def test_plain_text_and_decode():
    ours = ChatTokenizer.from_dir(GOLDEN / "eagle1-llama2" / "target")
    assert ours.chat_template is None
    ids = ours.encode_text("t5 t6")
    assert ids[-2:] == [5, 6]
    assert ours.decode([1, 5, 6, 2]) == "t5 t6"
    with pytest.raises(ValueError, match="chat template"):
        ours.render([{"role": "user", "content": "t5"}])


def test_eos_ids_union_of_generation_config_and_config(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 2}))
    assert load_eos_token_ids(tmp_path) == (2,)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 2, 9]}))
    assert load_eos_token_ids(tmp_path) == (7, 2, 9)
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": 11}))
    assert load_eos_token_ids(tmp_path) == (7, 2, 9, 11)


def test_eos_falls_back_to_the_tokenizer(tmp_path):
    make_tokenizer_dir(tmp_path, MISTRAL)
    (tmp_path / "config.json").write_text(json.dumps({"eos_token_id": None}))
    assert ChatTokenizer.from_dir(tmp_path).eos_token_ids == (2,)
    assert ChatTokenizer.from_dir(GOLDEN / "eagle1-llama2" / "target").eos_token_ids == (2,)
