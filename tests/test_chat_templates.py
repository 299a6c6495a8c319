"""Which checkpoints' chat templates the course keeps, replaces or refuses, on tokenizers built here (no hub)."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from agentrl_lite.models import (
    embedded_checkpoint,
    prepare_tokenizer,
    template_tool_format,
    tool_chat_template,
)

LLAMA3 = ("{{- bos_token }}{%- if tools %}<|start_header_id|>system<|end_header_id|>Respond with a JSON for a function "
          'call: {"name": function name, "parameters": dictionary of argument name and its value}.'
          "{%- for t in tools %}{{ t | tojson }}{%- endfor %}<|eot_id|>{%- endif %}"
          "{%- for m in messages %}{%- if m.role == 'ipython' %}<|python_tag|>{%- endif %}"
          "<|start_header_id|>{{ m.role }}<|end_header_id|>{{ m.content }}<|eot_id|>{%- endfor %}")
MISTRAL = ("{{ bos_token }}{%- if tools %}[AVAILABLE_TOOLS]{{ tools | tojson }}[/AVAILABLE_TOOLS]{%- endif %}"
           "{%- for m in messages %}{%- if m.role == 'user' %}[INST]{{ m.content }}[/INST]{%- elif m.tool_calls %}"
           "[TOOL_CALLS]{{ m.tool_calls | tojson }}{%- else %}{{ m.content }}{%- endif %}{%- endfor %}")
HERMES = ("{%- if tools %}<|im_start|>system\nTools: {{ tools | tojson }}\nCall them as <tool_call>{...}</tool_call>"
          "<|im_end|>\n{%- endif %}{%- for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
          "{%- endfor %}")


def non_chatml_tokenizer(name: str, template: str, specials: list[str]) -> PreTrainedTokenizerFast:
    """A word-level tokenizer whose vocabulary has `specials` and no ChatML tokens, as a Llama-3 or Mistral
    checkpoint's has."""
    vocab = {token: i for i, token in enumerate(["<unk>", *specials, "hello", "world"])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, name_or_path=name, unk_token="<unk>",
                                   bos_token=specials[0], eos_token=specials[1], chat_template=template)


def test_templates_are_read_for_the_tool_call_format_they_teach():
    assert template_tool_format(HERMES).startswith("Hermes")
    assert template_tool_format(LLAMA3).startswith("Llama-3")
    assert template_tool_format(MISTRAL).startswith("Mistral")
    assert template_tool_format("{% for m in messages %}{{ m.content }}{% endfor %}") is None  # no tools
    assert template_tool_format(None) is None


@pytest.mark.parametrize("name,template,specials,format_", [
    ("meta-llama/Llama-3.2-1B-Instruct", LLAMA3,
     ["<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>", "<|python_tag|>"], "Llama-3 JSON"),
    ("mistralai/Mistral-7B-Instruct-v0.3", MISTRAL, ["<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]"], "Mistral"),
    ("some/base-model", None, ["<s>", "</s>"], "cannot render tools"),
])
def test_a_checkpoint_that_does_not_speak_chatml_is_refused_by_name(name, template, specials, format_):
    tokenizer = non_chatml_tokenizer(name, template, specials)
    with pytest.raises(ValueError, match="not a ChatML model") as error:
        prepare_tokenizer(tokenizer)
    assert name in str(error.value) and format_ in str(error.value)


def test_a_chatml_checkpoint_keeps_its_hermes_template_or_gets_one():
    tokenizer = AutoTokenizer.from_pretrained(str(embedded_checkpoint()))
    tokenizer.chat_template = HERMES  # a ChatML model whose own template renders Hermes tool calls: kept
    assert prepare_tokenizer(tokenizer).chat_template == HERMES
    tokenizer.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>{% endfor %}"
    assert prepare_tokenizer(tokenizer).chat_template == tool_chat_template()  # cannot render tools: replaced
    assert tokenizer.padding_side == "left" and tokenizer.pad_token is not None
