"""Task generators. Every file under data/ is produced here, deterministically from a seed.

`python -m agentrl_lite data` rewrites data/; a test regenerates into a temporary folder and checks the
bytes are identical, so the committed files can always be traced to this code.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentrl_lite.chat import ToolCall, format_tool_call
from agentrl_lite.utils import REPO_ROOT

DATA_DIR = REPO_ROOT / "data"


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


def small_arithmetic_tasks() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every one-step sum, difference and product of small numbers, split 3:1 into train and held-out.

    `a + b` (a 2–20, b 2–9), `a - b` (a 10–20, b 2–9) and `a * b` (a, b 2–9): 304 questions. The raw
    embedded model gets about a quarter of these right when it answers at all; the rest of the time it
    rambles past its token budget or states a wrong number. That spread inside a group of samples is what
    GRPO needs (lesson 04): some siblings are right, some wrong, and nobody has to learn a new format.
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
    cut = len(rows) * 3 // 4
    return rows[:cut], rows[cut:]


IDENTITY_FORMS = ("{a} * 1", "1 * {a}", "{a} + 0", "0 + {a}", "{a} - 0")


def identity_arithmetic_tasks(n_train: int = 256, n_heldout: int = 64,
                              seed: int = 7) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Questions that look like the hard ones but need no tool: `487 * 1`, `0 + 652`, `913 - 0` (lesson 07).

    The operand has 2–3 digits, like the chains of `arithmetic_tasks`, so a policy cannot tell the two kinds
    apart by the size of the numbers; the answer is the operand itself, which even the embedded model can
    copy without a calculator (lesson 07 measures how often it does). Distinct questions, split into train
    and held-out.
    """
    rng = random.Random(seed)
    seen, rows = set(), []
    while len(rows) < n_train + n_heldout:
        a = rng.randint(10, 999)
        expression = rng.choice(IDENTITY_FORMS).format(a=a)
        if expression in seen:
            continue
        seen.add(expression)
        rows.append({"question": f"What is {expression}?", "expression": expression, "answer": str(a)})
    rows = [{"id": f"identity-{i:03d}", **row} for i, row in enumerate(rows)]
    return rows[:n_train], rows[n_train:]


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


def function_calling_splits() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Synthetic function-calling tasks (lesson 05): 480 for RL, 120 held out, and 64 SFT demonstrations of
    every category (irrelevance included, but only a few). All three are disjoint by request text.

    The demonstrations show every category because GRPO can only reinforce what the policy already samples:
    a cold start that never writes a second call gives parallel groups no spread in the number of calls
    (lesson 05's probes, `results/05_probe_*.json`)."""
    from agentrl_lite.synthetic_calls import demonstration, function_calling_tasks

    train = function_calling_tasks(480, seed=21, prefix="fc-train")
    heldout = function_calling_tasks(120, seed=22, exclude={t["question"] for t in train}, prefix="fc-heldout")
    seen = {t["question"] for t in train + heldout}
    sft_tasks = function_calling_tasks(64, seed=23, exclude=seen,
                                       weights={"simple": .25, "multiple": .25, "parallel": .2,
                                                "parallel_multiple": .2, "irrelevance": .1},
                                       prefix="fc-sft")
    demos = [{**t, "demonstration": demonstration(t)} for t in sft_tasks]
    return train, heldout, demos


def word_problem_splits() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Multi-step word problems (lessons 06–08); see `agentrl_lite.word_problems`."""
    from agentrl_lite.word_problems import word_problem_splits as splits

    return splits()


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def build_all(data_dir: Path | str = DATA_DIR) -> list[Path]:
    """Regenerate every data file. Seeds are fixed here, so the output is byte-identical every time."""
    data_dir = Path(data_dir)
    train = arithmetic_tasks(512, seed=1)
    heldout = arithmetic_tasks(128, seed=2, exclude=[t["question"] for t in train])
    demos = [{"id": t["id"], "messages": calculator_demonstration(t)} for t in train[:64]]
    small_train, small_heldout = small_arithmetic_tasks()
    identity_train, identity_heldout = identity_arithmetic_tasks()
    calls_train, calls_heldout, calls_sft = function_calling_splits()
    words_train, words_heldout, words_sft = word_problem_splits()
    files = {
        "arithmetic_train.jsonl": train,
        "arithmetic_heldout.jsonl": heldout,
        "arithmetic_sft.jsonl": demos,
        "small_arithmetic_train.jsonl": small_train,
        "small_arithmetic_heldout.jsonl": small_heldout,
        "identity_arithmetic_train.jsonl": identity_train,
        "identity_arithmetic_heldout.jsonl": identity_heldout,
        "toolcall_train.jsonl": calls_train,
        "toolcall_heldout.jsonl": calls_heldout,
        "toolcall_sft.jsonl": calls_sft,
        "word_problems_train.jsonl": words_train,
        "word_problems_heldout.jsonl": words_heldout,
        "word_problems_sft.jsonl": words_sft,
    }
    for name, rows in files.items():
        write_jsonl(data_dir / name, rows)
    return [data_dir / name for name in files]


def load_dataset(name: str, data_dir: Path | str = DATA_DIR):
    """Load `data/<name>.jsonl` as a `datasets.Dataset` (no network; a clear error if it is missing)."""
    import datasets

    path = Path(data_dir) / f"{name}.jsonl"
    if not path.exists():
        raise FileNotFoundError(f"{path} not found. Regenerate the data with: python -m agentrl_lite data")
    return datasets.Dataset.from_json(str(path))
