"""Multi-step word problems (a task family) for tool-integrated RL, lessons 06–08: the generator, the
splits, and lesson 08's per-turn process reward. `ArithmeticEnv` (`tasks.arithmetic`) serves and scores them.

Plain arithmetic is solved by a cold start alone (lesson 01): once the model has seen a few
demonstrations of "call the calculator on the question's expression", there is nothing left for RL. Here
the expression is not in the question. The model has to read a short story, pick the numbers, build the
computation and usually carry an intermediate result into a second call:

    "Maya buys 23 notebooks at 17 dollars each and pays with 500 dollars. How much change does she get?"
    → calculator("23 * 17") = 391 → calculator("500 - 391") = 109 → <answer>109</answer>

Each template is one story shape with a fixed plan of steps. Every step is an expression whose operands
are the story's numbers or earlier results (`{s0}` = the result of step 0). The demonstration of a task
makes one calculator call per step, so a cold start teaches multi-turn tool use; the demonstrations cover
only some templates (`SFT_TEMPLATES`), and the held-out set covers all of them, so what RL adds on the
unseen shapes is measurable.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from agentrl_lite.chat import ToolCall, format_tool_call
from agentrl_lite.episode import Episode
from agentrl_lite.paths import data_dir
from agentrl_lite.tasks import read_jsonl
from agentrl_lite.tools import calculator

NAMES = ["Maya", "Omar", "Lena", "Kofi", "Ines", "Ravi", "Yuki", "Tomas", "Amara", "Chen", "Sofia", "Jonas"]


@dataclass(frozen=True)
class Template:
    """One story shape.

    story: the question, with `{name}` and one `{x}` field per number.
    numbers: per number, its inclusive range.

    steps: the plan, one expression per calculator call; operands are number fields or `{s<i>}`, the result
        of step i. The answer is the last step's result.
    """

    key: str
    story: str
    numbers: dict[str, tuple[int, int]]
    steps: tuple[str, ...]


TEMPLATES: tuple[Template, ...] = (
    Template("change", "{name} buys {a} notebooks at {b} dollars each and pays with {c} dollars. "
             "How much change does {name} get?", {"a": (11, 29), "b": (12, 19), "c": (600, 900)},
             ("{a} * {b}", "{c} - {s0}")),
    Template("two_packs", "A school orders {a} boxes of {b} pencils and {c} boxes of {d} pens. "
             "How many items does it order in total?", {"a": (12, 38), "b": (12, 24), "c": (11, 29), "d": (13, 25)},
             ("{a} * {b}", "{c} * {d}", "{s0} + {s1}")),
    Template("savings", "{name} saves {a} dollars every week for {b} weeks, then spends {c} dollars on a bike. "
             "How many dollars are left?", {"a": (14, 48), "b": (12, 26), "c": (100, 160)},
             ("{a} * {b}", "{s0} - {c}")),
    Template("trip", "A bus drives {a} km/h for {b} hours and then {c} km/h for {d} hours. "
             "How many kilometres does it travel?", {"a": (41, 89), "b": (3, 9), "c": (31, 79), "d": (2, 8)},
             ("{a} * {b}", "{c} * {d}", "{s0} + {s1}")),
    Template("garden", "A garden is {a} metres by {b} metres. A pond of {c} metres by {d} metres is dug in it. "
             "How many square metres of garden are left?", {"a": (21, 48), "b": (15, 39), "c": (3, 9), "d": (4, 12)},
             ("{a} * {b}", "{c} * {d}", "{s0} - {s1}")),
    Template("stickers", "{name} has {a} stickers and gives {b} stickers to each of {c} friends. "
             "How many stickers does {name} keep?", {"a": (400, 800), "b": (8, 19), "c": (6, 14)},
             ("{b} * {c}", "{a} - {s0}")),
    Template("seats", "A hall has {a} rows of {b} seats. {c} seats are broken. Each ticket costs {d} dollars. "
             "How many dollars does a sold-out show earn?", {"a": (12, 25), "b": (14, 30), "c": (5, 40), "d": (7, 15)},
             ("{a} * {b}", "{s0} - {c}", "{s1} * {d}")),
    Template("crates", "A farm packs {a} crates with {b} apples each and {c} apples are left over. "
             "How many apples did the farm pick?", {"a": (23, 67), "b": (12, 36), "c": (3, 11)},
             ("{a} * {b}", "{s0} + {c}")),
)
SFT_TEMPLATES = ("change", "two_packs", "savings", "trip")
"""Templates the cold-start demonstrations cover; the other four appear only in RL training and held-out."""


def _evaluate(expression: str) -> int:
    """A plan step's value, computed by the same calculator the policy calls."""
    return int(calculator(expression))


def make_task(template: Template, rng: random.Random) -> dict[str, Any]:
    """One problem: question, answer, and the plan of concrete calculator expressions (`steps`)."""
    values = {k: rng.randint(lo, hi) for k, (lo, hi) in template.numbers.items()}
    results: dict[str, int] = {}
    steps = []
    for i, step in enumerate(template.steps):
        expression = step.format(**values, **results)
        results[f"s{i}"] = _evaluate(expression)
        steps.append(expression)
    question = template.story.format(name=rng.choice(NAMES), **values)
    return {"question": question, "answer": str(results[f"s{len(steps) - 1}"]), "template": template.key,
            "steps": steps, "expression": steps[-1]}


def word_problem_tasks(n: int, seed: int, templates: tuple[str, ...] | None = None, exclude: set[str] | None = None,
                       prefix: str = "wp") -> list[dict[str, Any]]:
    """`n` distinct problems drawn round-robin from `templates` (default: all), skipping `exclude`d questions."""
    pool = [t for t in TEMPLATES if templates is None or t.key in templates]
    if not pool:
        raise ValueError(f"no template among {templates}; known: {[t.key for t in TEMPLATES]}")
    rng = random.Random(seed)
    seen = set(exclude or ())
    tasks: list[dict[str, Any]] = []
    while len(tasks) < n:
        task = make_task(pool[len(tasks) % len(pool)], rng)
        if task["question"] in seen:
            continue
        seen.add(task["question"])
        tasks.append({"id": f"{prefix}-{len(tasks):04d}", **task})
    return tasks


def demonstration(task: dict[str, Any]) -> list[dict[str, str]]:
    """A correct multi-turn conversation (without the system prompt): one calculator call per step, then the
    answer. Tool results are the calculator's own output format (plain integers here)."""
    messages = [{"role": "user", "content": task["question"]}]
    for expression in task["steps"]:
        messages.append({"role": "assistant", "content": format_tool_call(ToolCall("calculator", {"expression": expression}))})
        messages.append({"role": "tool", "content": calculator(expression)})
    messages.append({"role": "assistant", "content": f"<answer>{task['answer']}</answer>"})
    return messages


COLD_START_STEPS = 10
"""SFT steps of the cold start of lessons 06 and 08 (batch 8, rate 1e-4), chosen on validation problems by
`course.cold_start_study` over five seeds: at 5 steps three seeds made one call and solved nothing; from 10 every seed
makes the two-call plan, and 10 leaves more headroom (problems greedy decoding fails and a sample at temperature 1
solves) than 15, where the demonstrated templates are at their ceiling (docs/design/08_credit_assignment.md)"""

COLD_START_DEMOS = {"crates": 8, "stickers": 4}
"""RL training problems of each template moved into the cold start's demonstrations (lessons 06 and 08), on top of
the `change` and `savings` demonstrations of `data/word_problems_sft.jsonl`. `stickers` gets the fewest: with none,
no sample at temperature 1 followed its plan, so GRPO could not reach it; among 0, 2 and 4, four left the most
headroom at `COLD_START_STEPS` on validation problems over five seeds, every seed making both calls
(`course.cold_start_study --demos stickers=N`, the rule on docs/design/08_credit_assignment.md)"""

HELDOUT_SIZE = 208
"""held-out problems, 26 per template: 104 of the two-step templates lessons 06 and 08 score"""


def _first_splits() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The training problems, the retired first held-out set and the SFT demonstrations' problems, pairwise
    disjoint by question. The retired set (64 problems, seed 32) was scored by single-seed selection probes
    before validation splits existed, so it no longer measures anything; it is generated only to keep every
    later split disjoint from it, and its draw still decides which demonstrations exist."""
    train = word_problem_tasks(400, seed=31, prefix="wp-train")
    retired = word_problem_tasks(64, seed=32, exclude={t["question"] for t in train}, prefix="wp-heldout")
    seen = {t["question"] for t in train + retired}
    sft_tasks = word_problem_tasks(48, seed=33, templates=SFT_TEMPLATES, exclude=seen, prefix="wp-sft")
    return train, retired, sft_tasks


def word_problem_splits() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """RL training problems (all templates), held-out problems (all templates, `HELDOUT_SIZE` of them, drawn from
    a seed no earlier file used, disjoint from every other split and from the retired first held-out set) and
    SFT demonstrations (only `SFT_TEMPLATES`)."""
    train, retired, sft_tasks = _first_splits()
    seen = {t["question"] for t in train + retired + sft_tasks + word_problem_validation()}
    heldout = word_problem_tasks(HELDOUT_SIZE, seed=36, exclude=seen, prefix="wp-test")
    demos = [{**t, "messages": demonstration(t)} for t in sft_tasks]
    return train, heldout, demos


def retired_heldout() -> list[dict[str, Any]]:
    """The first held-out set, retired (`_first_splits`): for tests that show no later split overlaps it."""
    return _first_splits()[1]


def word_problem_validation(n: int = 64) -> list[dict[str, Any]]:
    """Problems for tuning (lessons 06 and 08): all templates, disjoint from the training problems, the
    demonstrations and the retired held-out set (the new held-out set is drawn disjoint from these)."""
    train, retired, sft_tasks = _first_splits()
    seen = {t["question"] for t in train + retired + sft_tasks}
    return word_problem_tasks(n, seed=34, exclude=seen, prefix="wp-validation")


def plan_step_rewards(episode: Episode, weight: float = 0.25) -> list[float]:
    """A process reward for lesson 08: one reward per model turn of a word-problem episode.

    Model turn t earns `weight` when it makes exactly one calculator call whose value equals the value of
    plan step t (`episode.metadata["steps"]`), i.e. the turn computed what the plan computes at that point;
    every other turn (a wrong or extra call, several calls at once, the answer turn) earns 0. The values are
    compared, not the expressions, so `17 * 23` and `23*17` both count. Use it as `GRPOTrainer(turn_rewards=
    plan_step_rewards)` for turn-level credit, or sum it per episode for a trajectory-level reward.
    """
    values = [calculator(step) for step in episode.metadata["steps"]]
    rewards = []
    for t, turn in enumerate(episode.model_turns):
        earned = 0.0
        if t < len(values) and len(turn.tool_calls) == 1:
            expression = (turn.tool_calls[0].get("arguments") or {}).get("expression")
            if isinstance(expression, str) and calculator(expression) == values[t]:
                earned = weight
        rewards.append(earned)
    return rewards


def plan_step_reward(prompts: list[Any], completions: list[Any], *, episodes: list[Episode],
                     weight: float = 0.25, **kwargs: Any) -> list[float | None]:
    """`plan_step_rewards` summed per episode, as a reward function for `GRPOTrainer` (which passes the
    `episodes`): the same process reward, credited to the whole trajectory."""
    return [float(sum(plan_step_rewards(ep, weight))) for ep in episodes]


def cold_start_split(extra_demos: dict[str, int] | None = None, max_steps: int = 2, split: str = "heldout"
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """The splits of lessons 06 and 08, read from `data/`: (RL training problems, held-out problems,
    demonstrations), restricted to templates whose plan has at most `max_steps` calls.

    split: the scored problems, "heldout" (a lesson's reported numbers) or "validation" (tuning runs: the same
        templates, other problems; the training problems and demonstrations are the same either way).

    extra_demos: template → how many of its RL training problems become demonstrations (they leave the RL
        set), on top of the demonstrations in `data/word_problems_sft.jsonl`, which cover only
        `SFT_TEMPLATES`. Default `COLD_START_DEMOS`, the lessons' cold start.
    """
    if split not in ("heldout", "validation"):
        raise ValueError(f"cold_start_split: split must be 'heldout' or 'validation', not {split!r}.")
    extra_demos = COLD_START_DEMOS if extra_demos is None else extra_demos

    def keep(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for r in rows if len(r["steps"]) <= max_steps]

    train = keep(read_jsonl(data_dir() / "word_problems_train.jsonl"))
    heldout = keep(read_jsonl(data_dir() / f"word_problems_{split}.jsonl"))
    demos = keep(read_jsonl(data_dir() / "word_problems_sft.jsonl"))
    moved: list[dict[str, Any]] = []
    for template, n in extra_demos.items():
        pool = [t for t in train if t["template"] == template]
        if len(pool) < n:
            raise ValueError(f"cold_start_split: {len(pool)} training problems of {template!r}, {n} requested.")
        moved += pool[:n]
    ids = {t["id"] for t in moved}
    train = [t for t in train if t["id"] not in ids]
    demos += [{**t, "messages": demonstration(t)} for t in moved]
    return train, heldout, demos
