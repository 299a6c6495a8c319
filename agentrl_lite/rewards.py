"""Rewards (pipeline stage: episode → reward): the number a completion earns, which is all the policy ever
learns from. Also the one definition of a correct answer (`answers_match`), which evaluation uses too.

Every reward is a pure function with TRL's reward signature, so it plugs into `GRPOTrainer(reward_funcs=...)`
unchanged and scores this library's own rollouts too: our trainer calls every reward with
`reward_kwargs(episodes)`, the same arguments TRL would pass.

    reward(prompts, completions, **kwargs) -> list[float | None]

- `completions` are strings, or chat-message lists for conversational data (TRL passes
  `[{"role": "assistant", "content": ...}, {"role": "tool", ...}, ...]`). `completion_text` reads both the
  same way: only what the *policy* wrote counts; tool messages were written by the environment.
- Extra dataset columns arrive as keyword lists aligned with `completions` (`answer=[...]`,
  `gold_calls=[...]`); TRL also passes `completion_ids`, `trainer_state`, ... which rewards ignore.
- `None` means "this reward does not apply to this sample" (TRL skips it when summing rewards).

What each reward measures, and the paper it comes from:

- `format_reward`: the answer format is respected (1/0); `tool_format_reward`: a function-calling reply
  is clean tool calls only, or plain text with no call (1/0).
- `correctness_reward`: the `<answer>` is mathematically equal to the gold answer (HF math-verify).
- `final_number_reward`: the last number the policy wrote equals the gold answer (no format asked).
- `tool_call_reward`: ToolRL's fine-grained match of predicted vs gold calls, in [-3, 3];
  `exact_match_tool_reward` is the coarse all-or-nothing version.
- `otc_reward`: OTC-GRPO's correctness scaled by tool efficiency within a group; `tool_productivity`.
- `overlong_reward`: DAPO's soft overlong punishment; `length_penalty`: a plain per-token cost.
- `weighted_sum` composes rewards; `as_trl_reward` binds options and names a reward for TRL's logs.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from agentrl_lite.chat import ANSWER_CLOSE, ANSWER_OPEN, extract_answer, parse_tool_calls
from agentrl_lite.episode import Episode

Completion = str | list[dict[str, Any]]
RewardFunc = Callable[..., list[float | None]]


# --- reading a completion -----------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    """A message's content as text (plain string, or a list of {"type": "text", "text": ...} blocks)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


def completion_text(completion: Completion) -> str:
    """The text the policy wrote: a string as it is; for chat messages, the assistant messages' contents
    joined by newlines. Tool and user messages are left out: the environment wrote them, and a reward that
    reads them pays the policy for text it did not produce (the reward hack in lesson 02)."""
    if isinstance(completion, str):
        return completion
    return "\n".join(_content_text(m.get("content")) for m in completion if m.get("role") == "assistant")


def _structured_call(call: dict[str, Any]) -> dict[str, Any] | None:
    """A TRL/OpenAI structured call ({"type": "function", "function": {...}}) as {"name", "arguments"};
    None when it is malformed (arguments that are not a JSON object)."""
    function = call.get("function", call)
    arguments = function.get("arguments") or {}
    if isinstance(arguments, str):  # OpenAI style: arguments as a JSON string
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict) or not isinstance(function.get("name"), str):
        return None
    return {"name": function["name"], "arguments": arguments}


def predicted_calls(completion: Completion) -> list[dict[str, Any]]:
    """The well-formed tool calls the policy made, as `{"name": ..., "arguments": {...}}`, in order.

    Per assistant message: the structured `tool_calls` field when TRL filled it (it parses calls itself for
    the chat templates it knows), else the `<tool_call>` blocks of the message's text. Malformed blocks are
    not calls.
    """
    messages = [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion
    calls: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") != "assistant":
            continue
        if message.get("tool_calls"):
            calls += [c for c in map(_structured_call, message["tool_calls"]) if c is not None]
        else:
            calls += [c.to_dict() for c in parse_tool_calls(_content_text(message.get("content"))).calls]
    return calls


def count_tool_calls(completion: Completion) -> int:
    """How many tool calls the policy attempted, well-formed or not (each one costs a round trip to the
    environment): per assistant message, its structured `tool_calls`, else its `<tool_call>` blocks."""
    messages = [{"role": "assistant", "content": completion}] if isinstance(completion, str) else completion
    return sum(
        len(message["tool_calls"]) if message.get("tool_calls")
        else len(parse_tool_calls(_content_text(message.get("content"))).blocks)
        for message in messages
        if message.get("role") == "assistant"
    )


def has_malformed_call(completion: Completion) -> bool:
    """Whether any tool call the policy attempted is malformed (`count_tool_calls` counts attempts,
    `predicted_calls` keeps only the well-formed ones). ToolRL gives such an output the lowest correctness
    score and BFCL's checker rejects it whole ("decoder failed"), so the tool-call rewards do too: otherwise a
    reply that hedges with a broken call next to a right one would be paid in full."""
    return count_tool_calls(completion) != len(predicted_calls(completion))


def _column(name: str, values: Sequence[Any] | None, n: int, reward: str) -> Sequence[Any]:
    """A per-sample keyword column, checked: a clear error when the dataset lacks it or it is misaligned."""
    if values is None:
        raise ValueError(
            f"{reward} needs the per-sample column {name!r}: pass {name}=[...] (one entry per completion; "
            f"in TRL, a dataset column named {name!r})."
        )
    if len(values) != n:
        raise ValueError(f"{reward}: {name} has {len(values)} entries for {n} completions.")
    return values


# --- format and correctness ---------------------------------------------------------------------------------


def is_well_formatted(completion: Completion) -> bool:
    """The format contract of this course, exactly:

    1. the policy's text (see `completion_text`) contains exactly one `<answer>` and one `</answer>`, in
       that order, with non-blank content between them;
    2. the text ends with `</answer>` (trailing whitespace ignored): nothing, not even a tool call, after it;
    3. every `<tool_call>` block parses (`chat.parse_tool_calls` reports no error).
    """
    text = completion_text(completion)
    answer = extract_answer(text)
    return (
        text.count(ANSWER_OPEN) == 1
        and text.count(ANSWER_CLOSE) == 1
        and bool(answer)
        and text.rstrip().endswith(ANSWER_CLOSE)
        and not parse_tool_calls(text).errors
    )


def format_reward(prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any) -> list[float | None]:
    """1.0 when the completion respects the format contract (`is_well_formatted`), else 0.0.

    It says nothing about being right: `<answer>0</answer>` earns the full format reward. Use it next to
    a correctness reward, never alone.
    """
    return [float(is_well_formatted(c)) for c in completions]


def is_clean_tool_reply(completion: Completion) -> bool:
    """The format of a single-turn function-calling reply (lesson 05, BFCL-style tasks):

    every `<tool_call>` block parses, and either the reply is only tool calls (whitespace between them
    allowed) or it makes no call and says something in plain text (abstaining when no function fits).
    """
    text = re.sub(r"<\|(?:im_end|endoftext|eot_id)\|>\s*$", "", completion_text(completion))  # the end-of-turn token
    parsed = parse_tool_calls(text)
    if parsed.errors:
        return False
    if not parsed.calls:
        return bool(text.strip())
    outside = re.sub(r"<tool_call>.*?</tool_call>", "", text, flags=re.DOTALL)
    return not outside.strip()


def tool_format_reward(
    prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any
) -> list[float | None]:
    """ToolRL's R_format for a function-calling reply: 1.0 when `is_clean_tool_reply`, else 0.0."""
    return [float(is_clean_tool_reply(c)) for c in completions]


@functools.lru_cache(maxsize=4096)
def _parse_math(text: str) -> list:
    from math_verify import parse  # lazy: importing math-verify pulls in sympy (about a second)

    return parse(text)


def _is_numeral(expr: Any) -> bool:
    """Whether a parsed answer is a number written out (391, -0.5, 1,234, 3/4, \\frac{3}{4}) rather than an
    expression still to be evaluated (17*23, 2^3). math-verify keeps `a/b` unevaluated as a·b⁻¹."""
    import sympy

    if isinstance(expr, sympy.Number):
        return True
    if isinstance(expr, sympy.Mul) and len(expr.args) == 2:  # a/b with integers a, b
        num, den = expr.args
        return isinstance(num, sympy.Integer) and isinstance(den, sympy.Pow) \
            and isinstance(den.base, sympy.Integer) and den.exp == -1
    return False


def answers_match(predicted: str | None, gold: Any, final_form: bool = True) -> bool:
    """Whether a predicted answer equals the gold one mathematically, by HF math-verify.

    Both sides go through `math_verify.parse` (integers, decimals, fractions `1/2`, LaTeX `\\frac{1}{2}`,
    thousands separators `1,234`, signs, words around the number) and are compared with `math_verify.verify`.
    A missing or blank prediction is never right.

    final_form: when the gold answer is a number, the prediction must be a number too, not an expression.
        math-verify evaluates what it parses, so without this `17 * 23` "equals" 391 and a policy can earn
        full reward by copying the question into the answer tag (a reward hack the embedded model finds
        after its cold start; lesson 02). Symbolic gold answers (`2^3`, `x + 1`) are compared as math-verify does.
    """
    if predicted is None or not predicted.strip() or gold is None:
        return False
    from math_verify import verify

    gold_parsed, predicted_parsed = _parse_math(str(gold)), _parse_math(predicted)
    if not gold_parsed or not predicted_parsed:
        return False
    if final_form and _is_numeral(gold_parsed[0]) and not _is_numeral(predicted_parsed[0]):
        return False
    return bool(verify(gold_parsed, predicted_parsed))


def correctness_reward(
    prompts: Sequence[Any],
    completions: Sequence[Completion],
    answer: Sequence[Any] | None = None,
    final_form: bool = True,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 when the content of the last `<answer>…</answer>` equals the gold `answer` (math-verify), else 0.0.

    No answer tag → 0.0. A gold answer of None → None (the sample has no reference: not applicable).
    Only the answer tag of the policy's own text counts: a right number elsewhere earns nothing.
    final_form: a numeric gold answer needs a number, not an expression such as `17 * 23` (see `answers_match`).
    """
    gold = _column("answer", answer, len(completions), "correctness_reward")
    return [
        None if g is None else float(answers_match(extract_answer(completion_text(c)), g, final_form))
        for c, g in zip(completions, gold, strict=True)
    ]


# --- text answers (search, memory): normalised exact match and token F1 -----------------------------------
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = re.compile(r"[^\w\s]")


def normalize_answer(text: str | None) -> str:
    """Lower case, punctuation and the articles a/an/the removed, whitespace collapsed: "The Osk Press." →
    "osk press". The one normalisation every text-answer score uses (SQuAD's rule, as in Search-R1)."""
    if text is None:
        return ""
    text = _PUNCTUATION.sub(" ", text.lower())
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(predicted: str | None, gold: Any) -> bool:
    """The normalised prediction equals the normalised gold answer (None or empty never matches)."""
    p = normalize_answer(predicted)
    return bool(p) and p == normalize_answer(str(gold))


def token_f1(predicted: str | None, gold: Any) -> float:
    """F1 of the normalised words of prediction and gold (multiset overlap); 0.0 for an empty side."""
    p, g = normalize_answer(predicted).split(), normalize_answer(str(gold)).split()
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def exact_match_reward(prompts: Sequence[Any], completions: Sequence[Completion], answer: Sequence[Any] | None = None,
                       **kwargs: Any) -> list[float | None]:
    """1.0 when the last `<answer>…</answer>` of the policy's text matches the gold `answer` after
    `normalize_answer`, else 0.0 (no tag: 0.0); None where the gold answer is None."""
    gold = _column("answer", answer, len(completions), "exact_match_reward")
    return [None if g is None else float(exact_match(extract_answer(completion_text(c)), g))
            for c, g in zip(completions, gold, strict=True)]


def f1_reward(prompts: Sequence[Any], completions: Sequence[Completion], answer: Sequence[Any] | None = None,
              **kwargs: Any) -> list[float | None]:
    """Token F1 between the last `<answer>` of the policy's text and the gold `answer` (partial credit)."""
    gold = _column("answer", answer, len(completions), "f1_reward")
    return [None if g is None else token_f1(extract_answer(completion_text(c)), g)
            for c, g in zip(completions, gold, strict=True)]


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?![\w.]*\d)")


def last_number(text: str) -> str | None:
    """The last number written in `text` (`-12`, `1,234`, `3.5`), or None when there is none."""
    found = _NUMBER.findall(text.replace("−", "-"))
    return found[-1] if found else None


def final_number_reward(
    prompts: Sequence[Any],
    completions: Sequence[Completion],
    answer: Sequence[Any] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """1.0 when the last number the policy wrote equals the gold `answer` (math-verify), else 0.0.

    No answer format is required: this is the reward for a model that has not learned one (lesson 04 starts
    the raw embedded model on it). Only the *last* number counts, so listing candidates does not pay, and a
    reply cut off by the token budget mid-sentence usually ends on the wrong number. A gold answer of
    None → None (not applicable).
    """
    gold = _column("answer", answer, len(completions), "final_number_reward")
    out: list[float | None] = []
    for c, g in zip(completions, gold, strict=True):
        out.append(None if g is None else float(answers_match(last_number(completion_text(c)), g)))
    return out


# --- tool calls: ToolRL fine-grained and coarse -------------------------------------------------------------


def _same_value(a: Any, b: Any) -> bool:
    """JSON values equal exactly: 2 == 2.0 (one JSON number), but True is not 1 and "2" is not 2."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    return type(a) is type(b) and a == b


def _jaccard(a: Counter, b: Counter) -> float:
    """|a ∩ b| / |a ∪ b| on multisets; two empty multisets are identical (1.0)."""
    inter = sum((a & b).values())
    union = sum(a.values()) + sum(b.values()) - inter
    return 1.0 if union == 0 else inter / union


def best_matching(weights: list[list[float]]) -> list[tuple[int, int]]:
    """The one-to-one matching of rows to columns with the largest total weight, as (row, column) pairs.

    Rectangular matrices are fine (the smaller side is matched completely). Hungarian algorithm with
    row/column potentials on the square, zero-padded cost matrix: O(n³), exact.
    """
    n_rows, n_cols = len(weights), max((len(row) for row in weights), default=0)
    n = max(n_rows, n_cols)
    cost = [[-weights[i][j] if i < n_rows and j < len(weights[i]) else 0.0 for j in range(n)] for i in range(n)]
    inf = float("inf")
    u, v = [0.0] * (n + 1), [0.0] * (n + 1)  # row and column potentials (index 0 is a sentinel)
    owner = [0] * (n + 1)  # owner[j]: the row (1-based) assigned to column j; 0 = free
    for row in range(1, n + 1):
        owner[0], col = row, 0
        slack, came_from, used = [inf] * (n + 1), [0] * (n + 1), [False] * (n + 1)
        while owner[col]:  # grow an alternating tree until it reaches a free column
            used[col] = True
            i, delta, next_col = owner[col], inf, 0
            for j in range(1, n + 1):
                if not used[j]:
                    reduced = cost[i - 1][j - 1] - u[i] - v[j]
                    if reduced < slack[j]:
                        slack[j], came_from[j] = reduced, col
                    if slack[j] < delta:
                        delta, next_col = slack[j], j
            for j in range(n + 1):
                if used[j]:
                    u[owner[j]] += delta
                    v[j] -= delta
                else:
                    slack[j] -= delta
            col = next_col
        while col:  # flip the augmenting path that ends at the free column
            owner[col] = owner[came_from[col]]
            col = came_from[col]
    return sorted((owner[j] - 1, j - 1) for j in range(1, n + 1) if owner[j] - 1 < n_rows and j - 1 < n_cols)


def tool_call_match(predicted: Sequence[dict[str, Any]], gold: Sequence[dict[str, Any]]) -> dict[str, float]:
    """ToolRL's three-level match of predicted calls P against gold calls G (see `tool_call_reward`).

    Returns {"r_name", "r_param", "r_value", "score", "s_max", "reward"}: r_param and r_value are totals
    over the best matching, score = r_name + r_param + r_value ∈ [0, s_max], reward = 6·score/s_max − 3.
    """
    r_name = _jaccard(Counter(c["name"] for c in gold), Counter(c["name"] for c in predicted))
    s_max = 1.0 + sum(1 + len(g.get("arguments") or {}) for g in gold)

    def pair(g: dict[str, Any], p: dict[str, Any]) -> tuple[float, float]:
        """(parameter-name match, parameter-value match) of one gold and one predicted call."""
        if g["name"] != p["name"]:  # only calls to the same tool are compared argument by argument
            return 0.0, 0.0
        g_args, p_args = g.get("arguments") or {}, p.get("arguments") or {}
        r_param = _jaccard(Counter(list(g_args)), Counter(list(p_args)))
        r_value = float(sum(k in p_args and _same_value(p_args[k], v) for k, v in g_args.items()))
        return r_param, r_value

    pairs = [[pair(g, p) for p in predicted] for g in gold]
    matched = [pairs[i][j] for i, j in best_matching([[a + b for a, b in row] for row in pairs])]
    r_param, r_value = sum((a for a, _ in matched), 0.0), sum((b for _, b in matched), 0.0)
    score = r_name + r_param + r_value
    return {"r_name": r_name, "r_param": r_param, "r_value": r_value, "score": score, "s_max": s_max,
            "reward": 6.0 * score / s_max - 3.0}


def tool_call_reward(
    prompts: Sequence[Any],
    completions: Sequence[Completion],
    gold_calls: Sequence[list[dict[str, Any]] | None] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """ToolRL's fine-grained correctness reward R_correct ∈ [−3, 3] for the calls a completion makes.

    From "ToolRL: Reward is All Tool Learning Needs" (Qian et al., 2025), section 3.3, with P the predicted
    calls (`predicted_calls`) and G the gold calls, each `{"name": ..., "arguments": {...}}`:

    - tool names: r_name = |N_G ∩ N_P| / |N_G ∪ N_P| on the multisets of names, in [0, 1];
    - parameter names: r_param = Σ over matched pairs (g, p) of Jaccard(keys(g), keys(p)), in [0, |G|];
    - parameter values: r_value = Σ over matched pairs of #{k ∈ keys(g): p[k] == g[k]}, in [0, Σ_g |keys(g)|];
    - pairs come from the matching of P to G (same tool name only) that maximises r_param + r_value;
      the paper asks for the optimal matching, which we compute exactly (Hungarian algorithm);
    - R_correct = 6 · (r_name + r_param + r_value) / S_max − 3, with S_max = 1 + |G| + Σ_g |keys(g)|.

    The paper's total is R_format + R_correct ∈ [−3, 4]; compose with a format reward via `weighted_sum`.

    Conventions: no gold and no predicted calls is a perfect abstention (+3); calls where none were expected
    score −3; a completion with any malformed call scores −3, as in ToolRL's code (see `has_malformed_call`);
    values compare as JSON values (`"17*23"` ≠ `"17 * 23"`). A gold entry of None → None.
    """
    gold = _column("gold_calls", gold_calls, len(completions), "tool_call_reward")
    return [
        None if g is None else -3.0 if has_malformed_call(c) else tool_call_match(predicted_calls(c), g)["reward"]
        for c, g in zip(completions, gold, strict=True)
    ]


def _canonical(call: dict[str, Any]) -> str:
    return json.dumps({"name": call["name"], "arguments": call.get("arguments") or {}}, sort_keys=True)


def exact_match_tool_reward(
    prompts: Sequence[Any],
    completions: Sequence[Completion],
    gold_calls: Sequence[list[dict[str, Any]] | None] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """Coarse tool-call reward: 1.0 when the predicted calls equal the gold calls exactly (same multiset of
    name + arguments, order ignored) and no attempted call is malformed, else 0.0. None where the gold calls
    are None.

    ToolRL's coarse variant is the same test on its scale: +3 / −3, i.e. `6 * exact - 3`. A near miss (one
    wrong argument) earns nothing here, but partial credit from `tool_call_reward`.
    """
    gold = _column("gold_calls", gold_calls, len(completions), "exact_match_tool_reward")
    return [
        None if g is None
        else float(not has_malformed_call(c) and Counter(map(_canonical, predicted_calls(c))) == Counter(map(_canonical, g)))
        for c, g in zip(completions, gold, strict=True)
    ]


# --- tool efficiency: OTC -----------------------------------------------------------------------------------


def otc_tool_score(m: int, n: int, c: float = 1.0) -> float:
    """OTC-GRPO's tool-use score r_tool ∈ [0, 1] for a trajectory with m calls when n calls were optimal::

        n = 0:  r_tool = cos(m·π / (2m + c))            1 at m = 0, decays towards 0 as m grows
        n > 0:  r_tool = sin(f(m, n)·π / (2n)),  f(m, n) = 2nm / (m + n)
                                                         1 at m = n; 0 at m = 0; → 0 as m → ∞

    c: smoothing constant of the n = 0 branch (larger c: slower decay).
    """
    if m < 0 or n < 0:
        raise ValueError(f"tool-call counts must be ≥ 0, got m={m}, n={n}")
    if n == 0:
        return math.cos(m * math.pi / (2 * m + c))
    f = 2 * n * m / (m + n)  # harmonic-mean-like map of m into [0, 2n): f(n, n) = n
    return math.sin(f * math.pi / (2 * n))


def otc_reward(
    prompts: Sequence[Any],
    completions: Sequence[Completion],
    *,
    group_size: int,
    correct: Sequence[float | None] | None = None,
    tool_calls: Sequence[int] | None = None,
    answer: Sequence[Any] | None = None,
    c: float = 1.0,
    alpha: float = 1.0,
    min_calls: int = 0,
    **kwargs: Any,
) -> list[float | None]:
    """OTC-GRPO's tool-integrated reward: correctness scaled by tool efficiency, α · r_tool(m, n) · r_correct.

    From "Acting Less is Reasoning More! Teaching Model to Act Efficiently" (OTC, Wang et al., 2025).
    Completions come in consecutive groups of `group_size` answers to the same prompt (as TRL orders them).
    Within a group, n = the fewest tool calls among its correct answers (the best the policy has shown it
    can do); each answer with m calls gets α · `otc_tool_score(m, n, c)` · correct.

    correct: per-sample correctness in [0, 1]; default `correctness_reward` against `answer`. None → None.
    tool_calls: per-sample call counts m; default `count_tool_calls` of each completion.
    A group without a correct answer has no n: every reward in it is 0.0 (they would be 0 anyway, since
    r_correct = 0), so GRPO sees no signal from that group, exactly as with plain correctness.

    min_calls: a floor under n, for tasks that cannot be solved with fewer calls (a question about a corpus the
        model has never read needs at least one search; an answer right without one was a guess, and should not
        set the group's optimum to zero calls). 0: OTC as published.
    """
    n_samples = len(completions)
    if group_size < 1 or n_samples % group_size:
        raise ValueError(f"otc_reward: {n_samples} completions do not split into groups of {group_size}.")
    if correct is None:
        correct = correctness_reward(prompts, completions, answer=answer)
    if tool_calls is None:
        tool_calls = [count_tool_calls(comp) for comp in completions]
    correct = _column("correct", correct, n_samples, "otc_reward")
    tool_calls = _column("tool_calls", tool_calls, n_samples, "otc_reward")
    rewards: list[float | None] = []
    for start in range(0, n_samples, group_size):
        group = range(start, start + group_size)
        solved = [tool_calls[i] for i in group if correct[i]]
        n = max(min(solved), min_calls) if solved else None  # the group's optimal number of calls
        for i in group:
            if correct[i] is None:
                rewards.append(None)
            elif n is None:
                rewards.append(0.0)
            else:
                rewards.append(alpha * otc_tool_score(int(tool_calls[i]), n, c) * float(correct[i]))
    return rewards


def tool_productivity(correct: Sequence[float | None], tool_calls: Sequence[int]) -> float:
    """OTC's tool productivity: correct answers per tool call over a whole evaluation,
    TP = Σ correct / max(1, Σ tool calls). Samples with correct = None are skipped. With no call at all the
    denominator is 1, so TP is then the number of correct answers (tool-free answers are maximally
    productive); higher is better."""
    pairs = [(c, m) for c, m in zip(correct, tool_calls, strict=True) if c is not None]
    return sum(c for c, _ in pairs) / max(1, sum(m for _, m in pairs))


# --- length shaping: DAPO soft overlong punishment ----------------------------------------------------------


def overlong_penalty(length: int, max_length: int, cache_length: int) -> float:
    """DAPO's soft overlong punishment for one response of `length` tokens ("DAPO: An Open-Source LLM
    Reinforcement Learning System at Scale", Yu et al., 2025):

        0                                          if length ≤ max_length − cache_length
        ((max_length − cache_length) − length) / cache_length   inside the cache window (0 → −1)
        −1                                         if length > max_length
    """
    if not 0 < cache_length <= max_length:
        raise ValueError(f"need 0 < cache_length ≤ max_length, got cache_length={cache_length}, max_length={max_length}")
    free = max_length - cache_length
    if length <= free:
        return 0.0
    if length <= max_length:
        return (free - length) / cache_length
    return -1.0


def _lengths(
    completion_lengths: Sequence[int] | None, completion_ids: Sequence[Sequence[int]] | None, n: int, reward: str
) -> list[int]:
    """Token counts per completion: `completion_lengths` when given, else the lengths of TRL's `completion_ids`."""
    if completion_lengths is None and completion_ids is not None:
        completion_lengths = [len(ids) for ids in completion_ids]
    return [int(x) for x in _column("completion_lengths", completion_lengths, n, reward)]


def overlong_reward(
    prompts: Sequence[Any],
    completions: Sequence[Completion],
    *,
    max_length: int,
    cache_length: int,
    completion_lengths: Sequence[int] | None = None,
    completion_ids: Sequence[Sequence[int]] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """`overlong_penalty` per completion, from token counts: `completion_lengths`, or the lengths of the
    `completion_ids` TRL passes to every reward. Lengths are tokens, never characters."""
    lengths = _lengths(completion_lengths, completion_ids, len(completions), "overlong_reward")
    return [overlong_penalty(n, max_length, cache_length) for n in lengths]


def length_penalty(
    prompts: Sequence[Any],
    completions: Sequence[Completion],
    *,
    max_length: int,
    completion_lengths: Sequence[int] | None = None,
    completion_ids: Sequence[Sequence[int]] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """A plain length cost, −min(length, max_length) / max_length ∈ [−1, 0]: every token costs the same,
    from the first one (unlike DAPO's, which is free until the cache window)."""
    lengths = _lengths(completion_lengths, completion_ids, len(completions), "length_penalty")
    return [-min(n, max_length) / max_length for n in lengths]


# --- composing rewards --------------------------------------------------------------------------------------


def as_trl_reward(fn: RewardFunc, name: str, **bound: Any) -> RewardFunc:
    """`fn` with keyword options bound (e.g. group_size, max_length) and `__name__` set to `name`, which
    TRL uses in its logs (`rewards/<name>/mean`)."""

    def reward(prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any) -> list[float | None]:
        return fn(prompts, completions, **{**kwargs, **bound})

    reward.__name__ = reward.__qualname__ = name
    reward.__doc__ = fn.__doc__
    return reward


def weighted_sum(
    reward_funcs: Sequence[RewardFunc], weights: Sequence[float] | None = None, name: str = "weighted_sum"
) -> RewardFunc:
    """One reward function: Σ_k w_k · r_k per sample, over the rewards that apply to it.

    A None from one reward is skipped (it contributes nothing, the others are not rescaled); the sum is None
    only when every reward returned None for that sample. This is how TRL combines `reward_funcs` itself.
    """
    weights = [1.0] * len(reward_funcs) if weights is None else list(weights)
    if len(weights) != len(reward_funcs):
        raise ValueError(f"weighted_sum: {len(reward_funcs)} reward functions but {len(weights)} weights.")

    def reward(prompts: Sequence[Any], completions: Sequence[Completion], **kwargs: Any) -> list[float | None]:
        columns = [fn(prompts, completions, **kwargs) for fn in reward_funcs]
        out: list[float | None] = []
        for i in range(len(completions)):
            terms = [w * col[i] for w, col in zip(weights, columns, strict=True) if col[i] is not None]
            out.append(sum(terms) if terms else None)
        return out

    reward.__name__ = reward.__qualname__ = name
    return reward


# --- our rollouts, in TRL's form ----------------------------------------------------------------------------


def episode_completion(episode: Episode) -> list[dict[str, Any]]:
    """An episode's completion as TRL's conversational form: the assistant and tool messages after the prompt."""
    return episode.messages()[len(episode.prompt):]


def reward_kwargs(episodes: Sequence[Episode]) -> dict[str, list[Any]]:
    """The arguments of a reward function for this library's episodes, as TRL would pass them; the GRPO
    trainer calls every reward with exactly these. Use as `reward(**reward_kwargs(episodes))`.

    - `prompts`: each episode's prompt messages;
    - `completions` (`episode_completion`): the assistant and tool messages after the prompt. A text reward
      reads them through `completion_text`, i.e. the policy's own text only: a tool result that holds the
      right number earns nothing;
    - `completion_lengths`: tokens after the prompt, policy and tool tokens alike, as TRL's multi-turn
      `completion_ids` (the policy's own token count is `Episode.num_model_tokens`);
    - `tool_calls`: the well-formed calls the environment ran per episode (`Episode.num_tool_calls`), the
      count TRL's `environment_factory` gives (`trl_bridge.with_environment_tool_calls`);
    - `episodes`: the episodes themselves, for rewards that read turns or tokens (e.g. a process reward);
    - one column per task field that every episode has (e.g. `answer`), as TRL passes dataset columns.
    """
    shared = set.intersection(*(set(ep.metadata) for ep in episodes)) if episodes else set()
    return {
        **{key: [ep.metadata[key] for ep in episodes] for key in sorted(shared)},
        "prompts": [ep.prompt for ep in episodes],
        "completions": [episode_completion(ep) for ep in episodes],
        "completion_lengths": [len(ep.token_ids) - ep.prompt_length for ep in episodes],
        "tool_calls": [ep.num_tool_calls for ep in episodes],
        "episodes": list(episodes),
    }
