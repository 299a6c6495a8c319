"""Lesson 11 probe: does GRPO on the manager's turns change its operations, read teacher-forced on validation?

Item 10 of results/notes/11_memory_agents.md ends on the next thing to try: the manager's cold start learns a
prior over operations that its seed sets, and the decision has to be made where a mistake shows in the training
signal. GRPO on change, correct and repeat turns is that place: the careful reader's reward (`manager_reward`)
separates UPDATE from ADD there (an ADD beside the old value leaves two answers) and NOOP from UPDATE.

The lesson's held-out replays cannot show this: one wrong turn changes every later turn's bank. Here every one of
the validation turns is read teacher-forced (the bank the ideal operations built, greedy reply), as in items 9 and
10, before GRPO and every `--eval-every` steps: the chosen operation against the ideal one, per event.

Practice (`--practice`):
- `lesson`: the notebook's turns (change, correct, retract and repeat, and as many others drawn at random);
- `choice`: change, correct and repeat turns, and as many `state` turns (a new fact: ADD), the two sides of the
  decision the cold start gets wrong.
- `events`: choice's turns, each step drawing the four events in turn (a fourth of the prompts each), so that
  the `state` turns, half of choice's pool, do not set the direction alone.

Design switches, items 12-16 of the notes: `--mark` (the memory of the message's person and attribute marked in
the prompt), `--decision-weight` (memory.decision_reward beside manager_reward), `--counterfactual` (the cold start
also shows memory.counterfactual_tasks), `--sft-schedule linear` (the cold start's rate decays); `--steps 0` reads
the cold start alone.

One run per invocation, appended to results/11_probe_grpo_turns.json (item 11 of the notes: both mixes drove the
manager to ADD everywhere; about 15 minutes per run with the cold start cached, on a 2-core CPU with bf16):

    python benchmarks/probes/p11_grpo_turns.py --seed 1 --practice choice --sft-cache /work/sft/p11_s1.pt
    python benchmarks/probes/p11_grpo_turns.py --seed 1 --practice events --sft-cache /work/sft/p11_s1.pt
"""

from __future__ import annotations

import argparse
import datetime
import random
import resource
import time
from collections import Counter, defaultdict
from pathlib import Path

import torch

from agentrl_lite import seed_everything, write_results
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.course.results import current_command, read_results
from agentrl_lite.evaluate import evaluate
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.models import load_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.memory import (
    MemoryManagerEnv,
    cold_start_conversations,
    counterfactual_tasks,
    decision_reward,
    manager_reward,
    manager_tasks,
)

MIN_SHARE = 0.2  # the notebook's: every operation at least a fifth of the demonstrations
LESSON_CHOICE = ("change", "correct", "retract", "repeat")
DECISION = ("change", "correct", "repeat")
MANAGER_TOKENS = 64  # the notebook's


def cold_start(model, tokenizer, env, train_tasks, steps: int, seed: int,
               schedule: str = "constant") -> tuple[list[float], float]:
    """The notebook's cold start: every training turn, rarer operations resampled to a fifth each, 8 per step."""
    conversations, _ = cold_start_conversations(env, train_tasks, seed=seed, min_share=MIN_SHARE)
    start = time.perf_counter()
    losses = sft(model, tokenizer, conversations, env.toolbox_for(train_tasks[0]).schemas,
                 SFTConfig(steps=steps, batch_size=8, lr=1e-4, bf16="auto", seed=seed, micro_batch_tokens=2048,
                           lr_schedule=schedule))
    return losses, time.perf_counter() - start


def practice_turns(train_tasks: list[dict], mode: str, seed: int) -> list[dict]:
    rng = random.Random(seed)
    if mode == "lesson":
        turns = [t for t in train_tasks if t["event"] in LESSON_CHOICE]
        return turns + rng.sample([t for t in train_tasks if t["event"] not in LESSON_CHOICE], len(turns))
    turns = [t for t in train_tasks if t["event"] in DECISION]
    return turns + rng.sample([t for t in train_tasks if t["event"] == "state"], len(turns))


def by_event(turns: list[dict], rng: random.Random):
    """A draw of n tasks that takes the events in turn (change, correct, repeat, state, change, ...), each event's
    turns in their own seeded random order, epoch after epoch."""
    pools = {e: [t for t in turns if t["event"] == e] for e in (*DECISION, "state")}
    queues: dict[str, list[dict]] = {e: [] for e in pools}
    order = list(pools)
    count = [0]

    def draw(n: int) -> list[dict]:
        out = []
        for _ in range(n):
            event = order[count[0] % len(order)]
            count[0] += 1
            if not queues[event]:
                queues[event] = rng.sample(pools[event], len(pools[event]))
            out.append(queues[event].pop())
        return out

    return draw


def read_operations(model, tokenizer, env, tasks: list[dict]) -> dict:
    """Every turn teacher-forced, greedy: share right per event and the chosen operation per ideal one."""
    start = time.perf_counter()
    report = evaluate(model, tokenizer, env, tasks,
                      RolloutConfig(max_turns=1, max_new_tokens=MANAGER_TOKENS, temperature=0.0, batch_size=64,
                                    progress=False), label_key="event", dtype="auto")
    chosen: dict[str, Counter] = defaultdict(Counter)
    for task, s in zip(tasks, report.scores, strict=True):
        chosen[task["ideal"]["op"]][s["op"]] += 1
    return {"correct": report.accuracy, "by_event": report.by_label(),
            "chosen_by_ideal": {k: dict(v) for k, v in sorted(chosen.items())},
            "each": [int(c) for c in report.correct], "seconds": round(time.perf_counter() - start, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sft-steps", type=int, default=16, help="the cpu profile's")
    p.add_argument("--practice", choices=("lesson", "choice", "events"), default="choice",
                   help="events: choice's turns, each step drawing change, correct, repeat and state turns in turn")
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--prompts", type=int, default=8)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-5, help="the notebook's")
    p.add_argument("--eval-every", type=int, default=6)
    p.add_argument("--decision-weight", type=float, default=0.0, help="weight of memory.decision_reward (the "
                   "ideal operation and memory, whatever the content) beside manager_reward (item 13); 0 for none")
    p.add_argument("--sft-schedule", choices=("constant", "linear"), default="constant",
                   help="the cold start's learning-rate schedule (SFTConfig.lr_schedule; item 16)")
    p.add_argument("--counterfactual", action="store_true", help="the cold start also shows memory."
                   "counterfactual_tasks (change turns without their memory: ADD; new facts with one: UPDATE; item 15)")
    p.add_argument("--mark", action="store_true", help="MemoryManagerEnv(mark=True): the related memory of the "
                   "message's person and attribute is marked in the prompt (item 12)")
    p.add_argument("--sft-cache", type=Path, help="load the cold start from this file, or save it there")
    args = p.parse_args()
    seed_everything(args.seed)
    train_tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_train.jsonl"))
    val_tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_validation.jsonl"))
    env = MemoryManagerEnv(mark=args.mark)
    model, tokenizer = load_policy(None)
    if args.sft_cache and args.sft_cache.exists():
        model.load_state_dict(torch.load(args.sft_cache))
        losses, sft_seconds = [], None
    else:
        shown = train_tasks + (counterfactual_tasks(train_tasks, args.seed) if args.counterfactual else [])
        losses, sft_seconds = cold_start(model, tokenizer, env, shown, args.sft_steps, args.seed, args.sft_schedule)
        if args.sft_cache:
            torch.save(model.state_dict(), args.sft_cache)
    evaluations = {0: read_operations(model, tokenizer, env, val_tasks)}
    print("step 0", {k: v for k, v in evaluations[0].items() if k != "each"}, flush=True)
    practice = practice_turns(train_tasks, args.practice, args.seed)
    seed_everything(args.seed)
    config = grpo_preset(dict(steps=args.steps, prompts=args.prompts, group=args.group, lr=args.lr), args.seed,
                         max_turns=1, max_new_tokens=MANAGER_TOKENS, micro_batch_tokens=2048, micro_batch_size=4,
                         scale_rewards="none")
    rewards, weights = [manager_reward], [1.0]
    if args.decision_weight:
        rewards, weights = [manager_reward, decision_reward], [1.0, args.decision_weight]
    trainer = GRPOTrainer(model, tokenizer, env, practice, rewards, config, reward_weights=weights)
    drawn, draw = Counter(), trainer.next_tasks
    if args.practice == "events":
        draw = by_event(practice, trainer.task_rng)

    def recorded(n: int) -> list[dict]:  # the events GRPO practised on, as the trainer draws them
        tasks = draw(n)
        drawn.update(t["event"] for t in tasks)
        return tasks

    trainer.next_tasks = recorded
    start = time.perf_counter()
    for until in range(args.eval_every, args.steps + args.eval_every, args.eval_every):
        trainer.train(min(until, args.steps))
        evaluations[trainer.step_count] = read_operations(model, tokenizer, env, val_tasks)
        print(f"step {trainer.step_count}", {k: v for k, v in evaluations[trainer.step_count].items() if k != "each"},
              flush=True)
    grpo_seconds = time.perf_counter() - start - sum(e["seconds"] for s, e in evaluations.items() if s)
    keep = ("step", "reward", "reward_std", "frac_reward_zero_std", "completions/mean_length", "entropy", "grad_norm",
            "step_time")
    first, last = evaluations[0]["each"], evaluations[max(evaluations)]["each"]
    row = {"command": current_command(), "seed": args.seed, "practice": args.practice, "mark": args.mark,
           "counterfactual": args.counterfactual, "sft_schedule": args.sft_schedule,
           "decision_weight": args.decision_weight,
           "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "sft_steps": args.sft_steps, "sft_seconds": sft_seconds and round(sft_seconds, 1),
           "sft_losses": [round(x, 4) for x in losses], "sft_cached": sft_seconds is None,
           "grpo": {"steps": args.steps, "prompts": args.prompts, "group": args.group, "lr": args.lr,
                    "practice_turns": dict(Counter(t["event"] for t in practice)), "drawn": dict(drawn),
                    "seconds": round(grpo_seconds, 1),
                    "history": [{k: r.get(k) for k in keep} for r in trainer.history]},
           "turns": len(val_tasks), "evaluations": {str(k): v for k, v in evaluations.items()},
           "fixed": sum(a < b for a, b in zip(first, last, strict=True)), "broken": sum(a > b for a, b in zip(first, last, strict=True)),
           "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}
    old = read_results("11_probe_grpo_turns")
    write_results("11_probe_grpo_turns", {"split": "validation", "runs": (old["metrics"]["runs"] if old else []) + [row]},
                  profile="cpu", model="SmolLM2-135M-Instruct (embedded)", seed=args.seed)
    print("fixed", row["fixed"], "broken", row["broken"], "GRPO s", row["grpo"]["seconds"], flush=True)


if __name__ == "__main__":
    main()
