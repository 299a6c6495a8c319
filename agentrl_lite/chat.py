"""The chat format (pipeline stage 1): rendering conversations with the chat template, reading a model
turn's tool calls in the Hermes/Qwen2.5 format, and its final answer.

The policy is a text generator, so "calling a tool" means writing a block like this, possibly several per
turn, possibly with prose around them:

    <tool_call>
    {"name": "calculator", "arguments": {"expression": "17*23"}}
    </tool_call>

and "answering" means writing `<answer>...</answer>`. This module turns text into structured calls and
back. It is pure (no model, no tools) and `parse_tool_calls` never raises: during RL the policy writes
whatever it samples, and a malformed call must become an error message the model reads on its next turn
(so it can learn from it), never an exception that stops the training run.

What the parser accepts, and why:
- whitespace and newlines anywhere around the JSON object (harmless);
- raw newlines/tabs inside JSON strings (`strict=False`): models writing code often produce them;
- `"arguments"` given as a JSON *string* that contains an object (decoded: some models double-encode);
- a missing `"arguments"` field, read as `{}` (the toolbox then reports any missing argument by name);
- `</tool_call>` inside a JSON string value: the JSON object is read first, the closing tag after it.
What it reports as an error (one message per malformed block): invalid JSON, a JSON value that is not an
object, no `"name"`, `"parameters"` instead of `"arguments"`, `"arguments"` that is not an object, text
between the object and `</tool_call>`, a `<tool_call>` never closed (the turn was cut off), and a stray
`</tool_call>`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the parser itself needs no model library
    from transformers import PreTrainedTokenizerBase

OPEN, CLOSE = "<tool_call>", "</tool_call>"
ANSWER_OPEN, ANSWER_CLOSE = "<answer>", "</answer>"
HINT = 'Write <tool_call>{"name": ..., "arguments": {...}}</tool_call>.'
UNCLOSED = "Error: <tool_call> was not closed with </tool_call>"
STRAY_CLOSE = "Error: found </tool_call> without a matching <tool_call>."

_DECODER = json.JSONDecoder(strict=False)  # strict=False: allow raw newlines inside strings
_WHITESPACE = " \t\n\r"


@dataclass
class ToolCall:
    """One parsed call: which tool, with which keyword arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class ParseResult:
    """Everything found in one model turn.

    calls: the well-formed calls, in order of appearance.
    errors: one model-facing message (starting with "Error:") per malformed block, in order of appearance.

    blocks: calls and errors interleaved in the order they appear in the text (a ToolCall or an error
        string each); this is the order in which a toolbox answers them.
    """

    calls: list[ToolCall]
    errors: list[str]
    blocks: list[ToolCall | str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.blocks:
            self.blocks = [*self.calls, *self.errors]


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _call_from_json(obj: Any) -> ToolCall | str:
    """Validate a decoded JSON value as a call; return the ToolCall or an error message."""
    if not isinstance(obj, dict):
        return f"Error: the tool call must be a JSON object, got {_json_type(obj)}. {HINT}"
    if "name" not in obj:
        return f'Error: the tool call has no "name" field. {HINT}'
    name = obj["name"]
    if not isinstance(name, str):
        return f'Error: "name" must be a string, got {_json_type(name)}. {HINT}'
    if "arguments" not in obj:
        if "parameters" in obj:
            return f'Error: the call to \'{name}\' uses "parameters"; the field is called "arguments". {HINT}'
        return ToolCall(name, {})
    arguments = obj["arguments"]
    if isinstance(arguments, str):  # double-encoded: '{"expression": "1+1"}' as a string
        try:
            arguments = json.loads(arguments, strict=False)
        except json.JSONDecodeError:
            return f"Error: \"arguments\" of '{name}' must be a JSON object, got a string. {HINT}"
    if not isinstance(arguments, dict):
        return f"Error: \"arguments\" of '{name}' must be a JSON object, got {_json_type(arguments)}. {HINT}"
    return ToolCall(name, arguments)


def _skip_whitespace(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in _WHITESPACE:
        pos += 1
    return pos


def _parse_block(text: str, start: int) -> tuple[ToolCall | str, int]:
    """Parse the block whose body starts at `start` (just after `<tool_call>`).

    Returns (the call or an error message, where scanning resumes).
    """
    pos = _skip_whitespace(text, start)
    try:
        # Read one whole JSON value first, so a "</tool_call>" inside a string cannot end the block early.
        obj, end = _DECODER.raw_decode(text, pos)
    except (json.JSONDecodeError, RecursionError):
        obj, end = None, -1
    if end >= 0:
        after = _skip_whitespace(text, end)
        if text.startswith(CLOSE, after):
            return _call_from_json(obj), after + len(CLOSE)

    # The block is malformed: find where it ends, then explain what is wrong with it.
    scan_from = start if end < 0 else end
    close, next_open = text.find(CLOSE, scan_from), text.find(OPEN, scan_from)
    if close == -1 or (next_open != -1 and next_open < close):
        if next_open == -1:
            return f"{UNCLOSED} (the turn was probably cut off by the token limit). {HINT}", len(text)
        return f"{UNCLOSED} before the next <tool_call>. {HINT}", next_open
    resume = close + len(CLOSE)
    if end >= 0:
        return f"Error: unexpected text between the JSON value and </tool_call>. {HINT}", resume
    body = text[start:close].strip()
    if not body:
        return f"Error: the tool call is empty. {HINT}", resume
    try:
        json.loads(body, strict=False)
    except json.JSONDecodeError as e:
        return f"Error: the tool call is not valid JSON ({e.msg} at char {e.pos}). {HINT}", resume
    except RecursionError:
        pass
    return f"Error: the tool call is not valid JSON (it is nested too deeply). {HINT}", resume


def parse_tool_calls(text: str) -> ParseResult:
    """Find every `<tool_call>` block in a model turn. Never raises.

    Returns the well-formed calls and one error message per malformed block (see the module docstring).
    """
    blocks: list[ToolCall | str] = []
    pos = 0
    while True:
        open_at, close_at = text.find(OPEN, pos), text.find(CLOSE, pos)
        if open_at == -1 and close_at == -1:
            break
        if open_at == -1 or (close_at != -1 and close_at < open_at):
            blocks.append(f"{STRAY_CLOSE} {HINT}")
            pos = close_at + len(CLOSE)
            continue
        block, pos = _parse_block(text, open_at + len(OPEN))
        blocks.append(block)
    calls = [b for b in blocks if isinstance(b, ToolCall)]
    errors = [b for b in blocks if isinstance(b, str)]
    return ParseResult(calls, errors, blocks)


def has_tool_call(text: str) -> bool:
    """Whether the turn tries to call a tool (an opening tag is present, well-formed or not)."""
    return OPEN in text


def has_complete_tool_call(text: str) -> bool:
    """Whether the turn holds at least one closed `<tool_call> ... </tool_call>` block, valid JSON or not.

    SimpleTIR's "complete code block": a closed block is an action the environment answers, with the tool's
    result or with a parse error the model can learn from (as a closed code block that fails to run gets
    its traceback). A `<tool_call>` never closed (the turn was cut off) or a stray `</tool_call>` is not.
    """
    blocks = parse_tool_calls(text).blocks
    return any(not (isinstance(b, str) and b.startswith((UNCLOSED, STRAY_CLOSE))) for b in blocks)


def extract_answer(text: str) -> str | None:
    """The content of the last complete `<answer>...</answer>`, stripped; None when there is none."""
    close = text.rfind(ANSWER_CLOSE)
    if close == -1:
        return None
    open_at = text.rfind(ANSWER_OPEN, 0, close)
    if open_at == -1:
        return None
    return text[open_at + len(ANSWER_OPEN) : close].strip()


def format_tool_call(call: ToolCall) -> str:
    """The exact text a model should write for `call` (used to build demonstrations).

    Matches what the Qwen2.5 chat template renders for an assistant tool call, and
    `parse_tool_calls(format_tool_call(c)).calls == [c]`.
    """
    payload = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"{OPEN}\n{payload}\n{CLOSE}"


# --- the chat template ---------------------------------------------------------------------------------


def end_of_turn_id(tokenizer: PreTrainedTokenizerBase) -> int:
    """The token that closes an assistant turn (`<|im_end|>` in ChatML)."""
    token_id = tokenizer.convert_tokens_to_ids("<|im_end|>")
    if token_id is None or token_id == tokenizer.unk_token_id:
        token_id = tokenizer.eos_token_id
    return token_id


def render(tokenizer: PreTrainedTokenizerBase, messages: list[dict], tools: list[dict] | None, **kw: Any) -> str:
    """The chat template as text (tools rendered into the system prompt)."""
    return tokenizer.apply_chat_template(messages, tools=tools or None, tokenize=False, **kw)


def encode_prompt(tokenizer: PreTrainedTokenizerBase, messages: list[dict], tools: list[dict] | None) -> list[int]:
    text = render(tokenizer, messages, tools, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def environment_text(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict], results: list[str], tools: list[dict] | None
) -> str:
    """The text the environment inserts after a model turn: tool responses plus the next assistant header.

    Derived from the chat template itself (render with and without the tool messages, take the
    difference), so any prefix-preserving template works, not only ChatML. `messages` must end with
    the assistant turn just sampled.
    """
    before = render(tokenizer, messages, tools)
    after = render(tokenizer, messages + [{"role": "tool", "content": r} for r in results], tools,
                   add_generation_prompt=True)
    if not after.startswith(before):
        raise ValueError("The chat template is not prefix-preserving; multi-turn rollouts need one that is.")
    eos = tokenizer.decode([end_of_turn_id(tokenizer)])
    tail = before[before.rindex(eos) + len(eos):]  # what the template adds after the model's end-of-turn
    return tail + after[len(before):]
