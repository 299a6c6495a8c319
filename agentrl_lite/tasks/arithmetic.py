"""Arithmetic tasks (a task family): generators for the arithmetic files under `data/` and `ArithmeticEnv`,
the environment of every lesson whose answer is a number (00–04 on arithmetic, 06–08 on word problems).

The questions are multi-digit chains the embedded model gets wrong on its own (it answers 17*23 = 381),
small one-step sums for lesson 04, and identities (`487 * 1`) that need no tool, for lesson 07.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agentrl_lite.chat import ToolCall, format_tool_call
from agentrl_lite.episode import Episode
from agentrl_lite.rewards import answers_match, last_number
from agentrl_lite.tools import Toolbox, calculator

ANSWER_FORMAT = "Give the final answer as a number inside <answer></answer> tags, e.g. <answer>42</answer>."


def _arithmetic_task(rng: random.Random, min_ops: int, max_ops: int) -> dict[str, Any]:
    """One chain like `47 * 86 + 312`: 2–3 digit operands, + - *, usual precedence."""
    n_ops = rng.randint(min_ops, max_ops)
    operands = [rng.randint(10, 999) for _ in range(n_ops + 1)]
    ops = [rng.choice("+-*") for _ in range(n_ops)]
    if "*" not in ops:  # a product makes the chain hard without a tool
        ops[rng.randrange(n_ops)] = "*"
    # value with precedence: sum of signed products of the '*'-joined runs
    total, term, sign = 0, operands[0], 1
    for op, x in zip(ops, operands[1:], strict=True):
        if op == "*":
            term *= x
        else:
            total += sign * term
            term, sign = x, (1 if op == "+" else -1)
    total += sign * term
    expression = " ".join([str(operands[0])] + [f"{op} {x}" for op, x in zip(ops, operands[1:], strict=True)])
    return {"question": f"What is {expression}?", "expression": expression, "answer": str(total)}


def arithmetic_tasks(n: int, seed: int, min_ops: int = 1, max_ops: int = 2,
                     exclude: Iterable[str] = ()) -> list[dict[str, Any]]:
    """`n` distinct arithmetic questions (multi-digit, chained) that 135M models get wrong without a tool."""
    rng = random.Random(seed)
    seen = set(exclude)
    tasks = []
    while len(tasks) < n:
        task = _arithmetic_task(rng, min_ops, max_ops)
        if task["question"] in seen:
            continue
        seen.add(task["question"])
        tasks.append({"id": f"arith-{seed}-{len(tasks):04d}", **task})
    return tasks


def small_arithmetic_tasks(n_heldout: int = 76, n_validation: int = 38
                           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Every one-step sum, difference and product of small numbers, split into train, validation and held-out.

    `a + b` (a 2–20, b 2–9), `a - b` (a 10–20, b 2–9) and `a * b` (a, b 2–9): 304 questions. The raw
    embedded model gets about a quarter of these right when it answers at all; the rest of the time it
    rambles past its token budget or states a wrong number. That spread inside a group of samples is what
    GRPO needs (lesson 04): some siblings are right, some wrong, and nobody has to learn a new format.

    The split is by unordered operand pair: `8 + 5` and `5 + 8` (and `3 * 7`, `7 * 3`) always land in the
    same split, so no held-out question is a training question with its operands swapped. Validation is for
    tuning; held-out is read once per reported configuration.
    """
    rows = []
    for op, a_range, b_range in (("+", range(2, 21), range(2, 10)), ("-", range(10, 21), range(2, 10)),
                                 ("*", range(2, 10), range(2, 10))):
        for a in a_range:
            for b in b_range:
                value = a + b if op == "+" else a - b if op == "-" else a * b
                rows.append({"question": f"What is {a} {op} {b}?", "expression": f"{a} {op} {b}",
                             "answer": str(value)})
    random.Random(4).shuffle(rows)
    rows = [{"id": f"small-{i:03d}", **row} for i, row in enumerate(rows)]
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for row in rows:  # in shuffled order, so the groups come in a random order too
        groups.setdefault(commutative_key(row["expression"]), []).append(row)
    heldout: list[dict[str, Any]] = []
    validation: list[dict[str, Any]] = []
    train: list[dict[str, Any]] = []
    for group in groups.values():
        if len(heldout) + len(group) <= n_heldout:
            heldout += group
        elif len(validation) + len(group) <= n_validation:
            validation += group
        else:
            train += group
    return train, validation, heldout


def commutative_key(expression: str) -> tuple[str, ...]:
    """`"8 + 5"` and `"5 + 8"` → the same key; `-` keeps its order."""
    a, op, b = expression.split()
    return (op, *sorted((a, b), key=int)) if op in "+*" else (op, a, b)


IDENTITY_FORMS = ("{a} * 1", "1 * {a}", "{a} + 0", "0 + {a}", "{a} - 0")


def _identity_stream(n: int, seed: int = 7) -> list[dict[str, Any]]:
    """The first `n` distinct identity questions of the generator's stream (ids in stream order)."""
    rng = random.Random(seed)
    seen, rows = set(), []
    while len(rows) < n:
        a = rng.randint(10, 999)
        expression = rng.choice(IDENTITY_FORMS).format(a=a)
        if expression in seen:
            continue
        seen.add(expression)
        rows.append({"question": f"What is {expression}?", "expression": expression, "answer": str(a)})
    return [{"id": f"identity-{i:03d}", **row} for i, row in enumerate(rows)]


IDENTITY_SPLITS = {"train": (0, 256), "retired": (256, 320), "validation": (320, 384), "heldout": (384, 512)}
"""positions in the identity stream (`_identity_stream`): training, the retired first held-out set (single-seed
probes of lesson 07 scored it before validation splits existed), validation, and the held-out set drawn after
all of them"""


def identity_arithmetic_tasks() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Questions that look like the hard ones but need no tool: `487 * 1`, `0 + 652`, `913 - 0` (lesson 07).

    The operand has 2–3 digits, like the chains of `arithmetic_tasks`, so a policy cannot tell the two kinds
    apart by the size of the numbers; the answer is the operand itself, which even the embedded model can
    copy without a calculator (lesson 07 measures how often it does). Distinct questions: the training and
    the held-out ones of `IDENTITY_SPLITS`.
    """
    stream = _identity_stream(IDENTITY_SPLITS["heldout"][1])
    return [stream[slice(*IDENTITY_SPLITS[split])] for split in ("train", "heldout")]


def identity_arithmetic_validation() -> list[dict[str, Any]]:
    """Identity questions for tuning (lesson 07's validation split), distinct from every other split."""
    return _identity_stream(IDENTITY_SPLITS["validation"][1])[slice(*IDENTITY_SPLITS["validation"])]


def retired_identity_heldout() -> list[dict[str, Any]]:
    """The first identity held-out set, retired (`IDENTITY_SPLITS`): for tests that show no later split
    overlaps it."""
    return _identity_stream(IDENTITY_SPLITS["retired"][1])[slice(*IDENTITY_SPLITS["retired"])]


ARITHMETIC_HELDOUT_SIZE = 128
"""held-out chains (`arithmetic_splits`): lesson 07 scores the first half of its questions from here"""


def arithmetic_splits() -> dict[str, list[dict[str, Any]]]:
    """The chain questions' files: 512 for training (the first 64 also demonstrate the calculator), 128 for
    validation and `ARITHMETIC_HELDOUT_SIZE` held out, pairwise disjoint.

    The held-out set is drawn from a seed no earlier file used, disjoint from every other split and from the
    retired first held-out set (seed 2: lesson 07's single-seed probes scored it before validation splits
    existed; it is generated only to keep later splits disjoint from it)."""
    train = arithmetic_tasks(512, seed=1)
    retired = arithmetic_tasks(128, seed=2, exclude=[t["question"] for t in train])
    validation = arithmetic_tasks(128, seed=5, exclude=[t["question"] for t in train + retired])
    heldout = arithmetic_tasks(ARITHMETIC_HELDOUT_SIZE, seed=9,
                               exclude=[t["question"] for t in train + retired + validation])
    return {"train": train, "validation": validation, "heldout": heldout, "retired": retired}


def retired_arithmetic_heldout() -> list[dict[str, Any]]:
    """The first chain held-out set, retired (`arithmetic_splits`)."""
    return arithmetic_splits()["retired"]


def calculator_demonstration(task: dict[str, Any]) -> list[dict[str, str]]:
    """A correct tool-use conversation for one task (without the system prompt): call, result, answer.

    The assistant turns are written as raw text, exactly as the model should produce them.
    """
    call = ToolCall("calculator", {"expression": task["expression"]})
    return [
        {"role": "user", "content": task["question"]},
        {"role": "assistant", "content": format_tool_call(call)},
        {"role": "tool", "content": task["answer"]},
        {"role": "assistant", "content": f"<answer>{task['answer']}</answer>"},
    ]


@dataclass
class ArithmeticEnv:
    """Arithmetic questions and word problems, optionally with a calculator tool (an `Environment`).

    Scoring is strict: correct means an `<answer>` tag holding the right number. `lenient_correct` also
    accepts the last number of the completion, to separate "cannot compute" from "ignores the format".
    """

    tools: list[Callable] = field(default_factory=lambda: [calculator])
    """tools offered to the policy; empty for the no-tool baseline"""
    instructions: str | None = None
    """the system prompt, replacing the default one (which asks for the `<answer>` format)"""

    @property
    def system_prompt(self) -> str:
        if self.instructions is not None:
            return self.instructions
        if self.tools:
            return f"You are a careful assistant. Use the tools to compute. {ANSWER_FORMAT}"
        return f"You are a careful assistant. {ANSWER_FORMAT}"

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": task["question"]}]

    def toolbox_for(self, task: dict[str, Any] | None = None) -> Toolbox | None:
        """A fresh toolbox with `tools` (the same for every task, so `task` may be left out), or None."""
        return Toolbox(self.tools) if self.tools else None

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, float]:
        """correct: the `<answer>` equals the gold answer (`rewards.answers_match`); lenient_correct: the
        answer, or else the last number of the last model turn, does; formatted: an `<answer>` was given."""
        last_text = episode.model_turns[-1].content if episode.model_turns else ""
        lenient = episode.answer or last_number(last_text)  # an empty <answer></answer> falls back too
        return {
            "correct": float(answers_match(episode.answer, task["answer"])),
            "lenient_correct": float(answers_match(lenient, task["answer"])),
            "formatted": float(episode.answer is not None),
            "tool_calls": float(episode.num_tool_calls),
        }
