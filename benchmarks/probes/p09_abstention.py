"""Lesson 09 probe: how often does the cited cold start abstain on unanswerable questions, and where do its wrong
years come from?

Item 16 of results/notes/09_agentic_search.md read the cold start's abstention on the 10 validation questions as
confident (9 of 10); yet in GRPO (runs[15]) the unanswerable training groups scored 0.18–0.33, one right sample
of eight or none. This probe evaluates one cold start on unanswerable questions of both splits: greedy, and
`--samples` samples at temperature 1 (GRPO's) and 0.7. For every answer that is not `unknown` it records whether the
year appears in a retrieved snippet (copied from another document) and whether it appears in the model's own
cited evidence line (the line it writes before `<answer>`).

The cold start is read from `--sft-cache`, written by

    python benchmarks/probes/p09_validation.py --cite --sft-steps 12 --grpo-steps 0 --balanced \\
        --rl-kinds single_hop,two_hop,unanswerable --max-new-tokens 72 --seed 1 --sft-cache /work/sft_s1_cite.pt

then

    python benchmarks/probes/p09_abstention.py --sft-cache /work/sft_s1_cite.pt --train-questions 12

writes results/notes/09_probes/abstention.json.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import random
import time
from pathlib import Path

import torch

from agentrl_lite import seed_everything
from agentrl_lite.course.results import current_command, device_name
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import load_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.search import SearchEnv
from agentrl_lite.tools import SearchIndex

OUT = Path(__file__).resolve().parents[2] / "results" / "notes" / "09_probes" / "abstention.json"


def where_from(episode) -> str:
    """For a wrong answer: whether the model's own last line before <answer> holds it, and whether a snippet did."""
    answer = episode.answer
    if answer is None:
        return "no answer"
    if answer.strip().lower() == "unknown":
        return "unknown"
    snippets = " ".join(r for turn in episode.turns if turn.role == "tool" for r in turn.tool_results)
    cited = episode.model_turns[-1].content.split("<answer>")[0]
    return f"{'in' if answer in cited else 'not in'} its citation, {'in' if answer in snippets else 'not in'} a snippet"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sft-cache", required=True)
    p.add_argument("--train-questions", type=int, default=12, help="unanswerable training questions, a seeded sample")
    p.add_argument("--samples", type=int, default=4, help="samples per question at each temperature")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    seed_everything(args.seed)
    index = SearchIndex(read_jsonl(DATA_DIR / "search_corpus.jsonl"))
    train = [q for q in read_jsonl(DATA_DIR / "search_train.jsonl") if q["kind"] == "unanswerable"]
    demonstrated = {d["id"] for d in read_jsonl(DATA_DIR / "search_sft.jsonl")}
    splits = {"train": random.Random(0).sample(train, args.train_questions),
              "validation": [q for q in read_jsonl(DATA_DIR / "search_validation.jsonl") if q["kind"] == "unanswerable"]}
    model, tokenizer = load_policy(None)
    model.load_state_dict(torch.load(args.sft_cache))
    env = SearchEnv(index, cite=True)
    out: dict = {}
    for split, questions in splits.items():
        for name, temperature, n in (("greedy", 0.0, 1), ("t1.0", 1.0, args.samples), ("t0.7", 0.7, args.samples)):
            tasks = [q for q in questions for _ in range(n)]
            start = time.perf_counter()
            report = evaluate(model, tokenizer, env, tasks, RolloutConfig(max_turns=4, max_new_tokens=72,
                              temperature=temperature, batch_size=64, progress=False))
            right = collections.Counter(q["id"] for q, c in zip(tasks, report.correct, strict=True) if c)
            out[f"{split} {name}"] = {
                "questions": len(questions), "samples_per_question": n, "abstained": report.accuracy,
                "questions_right_every_time": sum(right[q["id"]] == n for q in questions),
                "questions_never_right": sum(right[q["id"]] == 0 for q in questions),
                "demonstrated_questions": sum(q["id"] in demonstrated for q in questions),
                "abstained_on_demonstrated": (sum(right[q["id"]] for q in questions if q["id"] in demonstrated)
                                              / max(1, n * sum(q["id"] in demonstrated for q in questions))),
                "where_from": dict(collections.Counter(where_from(ep) for ep in report.episodes)),
                "searches": report.calls_per_episode, "seconds": round(time.perf_counter() - start, 1),
                "examples": [ep.model_turns[-1].content for ep in report.episodes[:: max(1, n)][:6]]}
            print(split, name, {k: v for k, v in out[f"{split} {name}"].items() if k != "examples"}, flush=True)
    record = {"command": current_command(), "device": device_name(), "seed": args.seed, "profile": "cpu",
              "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"), "args": vars(args),
              "results": out}
    OUT.write_text(json.dumps(record, indent=2) + "\n")


if __name__ == "__main__":
    main()
