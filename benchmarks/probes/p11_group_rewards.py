"""Lesson 11 probe: where GRPO's push goes, per event and per operation, on the cold start's own samples.

Items 11 and 12 of results/notes/11_memory_agents.md: GRPO on the manager's turns drives it to ADD everywhere, with
and without the mark that shows which related memory holds the message's person and attribute. This probe reads the
first GRPO step's signal without taking it: for `--turns` training turns of each event it samples `--group` replies
at temperature 1 from a cached cold start, scores them with `manager_reward` (through `MemoryManagerEnv.score`), and
reports, per event, the share of each chosen operation, its mean reward, and the summed group advantage (reward minus
the group's mean, GRPO with `scale_rewards="none"`) that each operation receives: the sign says which way one
step pushes that operation on that event. UPDATE replies with the ideal target are split by whether they earned the
ideal reward (content with the history kept) or not. No update is taken; a few minutes.

    python benchmarks/probes/p11_group_rewards.py --sft-cache /work/sft/p11_s1_mark.pt --mark
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import time
from collections import defaultdict
from pathlib import Path

import torch

from agentrl_lite import seed_everything
from agentrl_lite.course.results import current_command
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import load_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.memory import MemoryManagerEnv, _written, manager_tasks

OUT = Path(__file__).resolve().parents[2] / "results" / "notes" / "11_probes" / "group_rewards.json"
EVENTS = ("state", "change", "correct", "repeat", "chat", "retract")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sft-cache", type=Path, required=True, help="a cold start saved by p11_grpo_turns.py")
    p.add_argument("--mark", action="store_true", help="the cold start was trained with MemoryManagerEnv(mark=True)")
    p.add_argument("--turns", type=int, default=24, help="training turns per event")
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    seed_everything(args.seed)
    train = manager_tasks(read_jsonl(DATA_DIR / "memory_train.jsonl"))
    rng = random.Random(args.seed)
    turns = [t for e in EVENTS for t in rng.sample([t for t in train if t["event"] == e], args.turns)]
    env = MemoryManagerEnv(mark=args.mark)
    model, tokenizer = load_policy(None)
    model.load_state_dict(torch.load(args.sft_cache))
    start = time.perf_counter()
    report = evaluate(model, tokenizer, env, [t for t in turns for _ in range(args.group)],
                      RolloutConfig(max_turns=1, max_new_tokens=64, temperature=1.0, batch_size=64, progress=False),
                      dtype="auto")
    seconds = time.perf_counter() - start
    rows: dict[str, dict] = {}
    for e in EVENTS:
        chosen: dict[str, list[float]] = defaultdict(list)
        push: dict[str, float] = defaultdict(float)
        spread, examples = 0, []
        event_turns = [(i, task) for i, task in enumerate(turns) if task["event"] == e]
        for i, task in event_turns:
            scores = report.scores[i * args.group:(i + 1) * args.group]
            mean = sum(s["reward"] for s in scores) / len(scores)
            spread += len({round(s["reward"], 6) for s in scores}) > 1
            for j, s in enumerate(scores):
                op = s["op"]
                if op == "UPDATE" and task["ideal"]["op"] == "UPDATE" and s["correct"]:
                    op = "UPDATE right target, ideal reward" if s["reward"] >= 1.05 else "UPDATE right target, less"
                    if op.endswith("less") and len(examples) < 8:
                        examples.append({"message": task["text"], "ideal": task["ideal"]["content"],
                                         "written": _written(report.episodes[i * args.group + j])})
                chosen[op].append(s["reward"])
                push[op] += s["reward"] - mean
        n = len(event_turns) * args.group
        rows[e] = {"ideal": sorted({t["ideal"]["op"] for _, t in event_turns}), "groups_with_spread": spread,
                   "ops": {op: {"share": round(len(r) / n, 3), "mean_reward": round(sum(r) / len(r), 3),
                                "summed_advantage": round(push[op], 2)} for op, r in sorted(chosen.items())},
                   "update_right_target_less_examples": examples}
        print(e, json.dumps(rows[e]), flush=True)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(OUT.read_text())["runs"] if OUT.exists() else []
    OUT.write_text(json.dumps({"what": "the cold start's samples at temperature 1 on training turns, per event: "
                               "share, mean reward and summed group advantage of each chosen operation",
                               "runs": old + [{
                                   "command": current_command(),
                                   "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
                                   "sft_cache": str(args.sft_cache), "mark": args.mark, "seed": args.seed,
                                   "turns_per_event": args.turns, "group": args.group, "seconds": round(seconds, 1),
                                   "events": rows}]}, indent=2) + "\n")


if __name__ == "__main__":
    main()
