"""Lesson 11 probe 9: does the manager's cold start settle UPDATE, whatever its seed?

Teacher-forced evaluation on the validation dialogues: each turn with the bank the ideal operations built
(`manager_tasks`), greedy reply, chosen operation against the ideal one, per event. The notebook's balanced
demonstrations (MIN_SHARE = 0.2 repetition), shuffled with the seed; ORDER is
  all:  every demonstration handed to SFT (the notebook), which draws steps × 8 of them
  used: only the first steps × 8 after the shuffle (the same kind of draw, without tokenizing the rest)
Usage: python probe_coldstart.py ORDER SEED [SFT_STEPS]   (prints one JSON line at the end)
"""
import json
import random
import sys
import time
from collections import Counter, defaultdict

from agentrl_lite import seed_everything
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import load_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.memory import MemoryManagerEnv, demonstration, manager_tasks

order, seed = sys.argv[1], int(sys.argv[2])
steps = int(sys.argv[3]) if len(sys.argv) > 3 else 16
seed_everything(seed)
train_tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_train.jsonl"))
val_tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_validation.jsonl"))
env = MemoryManagerEnv()
by_op = defaultdict(list)
for t in train_tasks:
    by_op[t["ideal"]["op"]].append(t)
rng = random.Random(seed)
shown = list(train_tasks) + [t for ts in by_op.values()
                             for t in rng.choices(ts, k=max(0, int(0.2 * len(train_tasks)) - len(ts)))]
rng.shuffle(shown)
if order == "all":  # the notebook: every demonstration tokenized, SFT draws its batches from all of them
    pass
elif order == "used":  # only the steps × 8 that SFT's one epoch uses, drawn the same way
    shown = shown[: steps * 8]
else:
    raise SystemExit(f"unknown order {order}")
conversations = [env.prompt(t) + demonstration(t)[1:] for t in shown]
model, tokenizer = load_policy(None)
start = time.perf_counter()
config = SFTConfig(steps=steps, batch_size=8, lr=1e-4, bf16=True, seed=seed, micro_batch_tokens=2048, progress=False)
losses = sft(model, tokenizer, conversations, env.toolbox_for(train_tasks[0]).schemas, config)
sft_seconds = time.perf_counter() - start
start = time.perf_counter()
report = evaluate(model, tokenizer, env, val_tasks,
                  RolloutConfig(max_turns=1, max_new_tokens=64, temperature=0.0, batch_size=64, progress=False),
                  label_key="event", dtype="auto")
chosen = defaultdict(Counter)
for task, s in zip(val_tasks, report.scores, strict=True):
    chosen[task["ideal"]["op"]][s["op"]] += 1
print(json.dumps({"order": order, "seed": seed, "sft_steps": steps, "sft_seconds": round(sft_seconds, 1),
                  "eval_seconds": round(time.perf_counter() - start, 1), "losses": [round(x, 4) for x in losses],
                  "demonstrations": len(shown),
                  "correct": report.accuracy, "by_event": report.by_label(),
                  "chosen_by_ideal": {k: dict(v) for k, v in chosen.items()}}))
