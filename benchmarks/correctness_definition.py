"""How often the held-out "correct" of lessons 00–08 changes with the one definition of a right answer.

Until the architecture refactor, evaluation called an answer right when the *last number* it contained was
the gold one (`envs.numbers_match`), while the rewards asked math-verify, and refused an unevaluated
expression (`rewards.answers_match`). Evaluation now uses `answers_match` too. The committed results do not
store their held-out outputs, so this script measures the disagreement on fresh episodes of the policies
the lessons evaluate: the raw model, and the cold starts of lessons 01, 06 and 07, greedy (as the lessons
evaluate) and sampled at temperature 1 (where odd answers are more frequent).

    python benchmarks/correctness_definition.py            # writes results/bench/bench_correctness_definition.json
"""

from __future__ import annotations

import argparse
import re
import time

from agentrl_lite.course import seed_everything, write_results
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import load_policy
from agentrl_lite.rewards import answers_match, last_number
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.arithmetic import ArithmeticEnv, calculator_demonstration
from agentrl_lite.tasks.word_problems import cold_start_split

SEED = 0
_OLD_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


def old_numbers_match(predicted: str | None, gold: str) -> bool:
    """The evaluator's former definition, kept here only to compare against: the last number it finds."""
    found = _OLD_NUMBER.findall(predicted or "")
    try:
        value = float(found[-1].replace(",", "")) if found else None
    except ValueError:
        value = None
    return value is not None and abs(value - float(gold)) <= 1e-6 * max(1.0, abs(float(gold)))


def compare(report, tasks) -> dict:
    """Strict and lenient correctness of every episode under both definitions, and the disagreeing answers."""
    rows = {"strict": [0, 0], "lenient": [0, 0]}
    disagreements = []
    for task, ep in zip(tasks, report.episodes, strict=True):
        last_text = ep.model_turns[-1].content if ep.model_turns else ""
        for kind, predicted_old, predicted_new in (
            ("strict", ep.answer, ep.answer),
            ("lenient", ep.answer or last_text, ep.answer or last_number(last_text)),
        ):
            old, new = old_numbers_match(predicted_old, task["answer"]), answers_match(predicted_new, task["answer"])
            rows[kind][0] += old
            rows[kind][1] += new
            if old != new:
                disagreements.append({"kind": kind, "gold": task["answer"], "answer": ep.answer,
                                      "last_turn": last_text[-120:], "old": old, "new": new})
    n = len(tasks)
    return {"n": n, "strict_old": rows["strict"][0] / n, "strict_new": rows["strict"][1] / n,
            "lenient_old": rows["lenient"][0] / n, "lenient_new": rows["lenient"][1] / n,
            "disagreements": disagreements}


def probe(model, tokenizer, env, tasks, turns: int, tokens: int, samples: int) -> dict:
    greedy = evaluate(model, tokenizer, env, tasks, RolloutConfig(max_turns=turns, max_new_tokens=tokens,
                                                                 temperature=0.0, batch_size=64, progress=False))
    repeated = [t for t in tasks for _ in range(samples)]
    sampled = evaluate(model, tokenizer, env, repeated, RolloutConfig(max_turns=turns, max_new_tokens=tokens,
                                                                     temperature=1.0, batch_size=64, progress=False))
    return {"greedy": compare(greedy, tasks), "sampled_t1": compare(sampled, repeated)}


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    start = time.perf_counter()
    seed_everything(SEED)
    model, tokenizer = load_policy()
    raw_state = {k: v.clone() for k, v in model.state_dict().items()}
    arithmetic = read_jsonl(DATA_DIR / "arithmetic_heldout.jsonl")[:64]
    metrics = {}
    # lessons 00 and 01: the raw model without and with the calculator
    metrics["raw_no_tool"] = probe(model, tokenizer, ArithmeticEnv(tools=[]), arithmetic, 1, 64, 4)
    metrics["raw_calculator"] = probe(model, tokenizer, ArithmeticEnv(), arithmetic, 3, 64, 4)
    # lesson 01: 4 SFT steps on 32 calculator demonstrations
    env = ArithmeticEnv()
    demos = [d["messages"] for d in read_jsonl(DATA_DIR / "arithmetic_sft.jsonl")][:32]
    sft(model, tokenizer, [env.prompt({"question": ""})[:1] + d for d in demos], env.toolbox_for().schemas,
        SFTConfig(steps=4, batch_size=8, lr=1e-4, seed=SEED, progress=False))
    metrics["lesson01_sft"] = probe(model, tokenizer, env, arithmetic, 3, 64, 4)
    # lesson 06 (and 08): 5 SFT steps on the cold-start demonstrations, two-step word problems
    model.load_state_dict(raw_state)
    _, heldout, word_demos = cold_start_split({"crates": 8})  # the demonstrations it was measured with
    sft(model, tokenizer, [env.prompt(d)[:1] + d["messages"] for d in word_demos], env.toolbox_for().schemas,
        SFTConfig(steps=5, batch_size=8, lr=1e-4, bf16=True, seed=SEED, progress=False))
    metrics["lesson06_sft"] = probe(model, tokenizer, env, heldout, 3, 40, 4)
    # lesson 07: hard chains demonstrated with a call, identities (`487 * 1`) answered directly
    model.load_state_dict(raw_state)
    hard, easy = read_jsonl(DATA_DIR / "arithmetic_train.jsonl")[:32], read_jsonl(
        DATA_DIR / "identity_arithmetic_train.jsonl")[:32]
    direct = [[{"role": "user", "content": t["question"]}, {"role": "assistant", "content": f"<answer>{t['answer']}</answer>"}]
              for t in easy]
    env07 = ArithmeticEnv(instructions="You are a careful assistant. Call a tool only when you need it. "
                                       "Give the final answer as a number inside <answer></answer> tags, e.g. <answer>42</answer>.")
    sft(model, tokenizer, [env07.prompt({"question": ""})[:1] + d for d in
                           [calculator_demonstration(t) for t in hard] + direct],
        env07.toolbox_for().schemas, SFTConfig(steps=8, batch_size=8, lr=1e-4, bf16=True, seed=SEED, progress=False))
    mixed = read_jsonl(DATA_DIR / "identity_arithmetic_heldout.jsonl")[:32] + arithmetic[:32]
    metrics["lesson07_sft"] = probe(model, tokenizer, env07, mixed, 2, 48, 4)
    total = sum(len(m[k]["disagreements"]) for m in metrics.values() for k in m)
    episodes = sum(m[k]["n"] for m in metrics.values() for k in m)
    metrics["summary"] = {"episodes": episodes, "episodes_scored_twice": 2 * episodes, "disagreements": total}
    metrics["seconds"] = time.perf_counter() - start
    path = write_results("bench_correctness_definition", metrics, profile="cpu",
                         model="SmolLM2-135M-Instruct (embedded)", seed=SEED)
    print(f"{total} disagreements in {2 * episodes} scorings of {episodes} episodes; wrote {path}")


if __name__ == "__main__":
    main()
