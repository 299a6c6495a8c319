"""Lesson 11's answer agent: its cold start as the notebook runs it (lr 3e-4, batches of 8, k = 3, bf16 where fast),
training every layer or only the top N (`models.train_top_layers`), evaluated on the validation dialogues' oracle,
append-only and last-write-wins banks. Appends one run per call to results/notes/11_probes/answer_top.json.

usage: python benchmarks/probes/p11_answer_top.py --steps 40 [--train-top 15] [--seed 0]
"""
import argparse
import json
import random
import time

import torch

from agentrl_lite import seed_everything
from agentrl_lite.course.results import device_name
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import bf16_is_fast, load_policy, train_top_layers
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, REPO_ROOT, read_jsonl
from agentrl_lite.tasks import memory as M

OUT = REPO_ROOT / "results" / "notes" / "11_probes" / "answer_top.json"

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--train-top", type=int, default=0, help="0: every layer")
p.add_argument("--seed", type=int, default=0)
args = p.parse_args()

seed_everything(args.seed)
train = read_jsonl(DATA_DIR / "memory_train.jsonl")
val = read_jsonl(DATA_DIR / "memory_validation.jsonl")
env, K = M.AnswerEnv(), 3
model, tok = load_policy(None)
parameters = train_top_layers(model, args.train_top) if args.train_top else None
demos = [t for t in M.answer_demonstrations(train, K) if t["source"] != "full context"]
random.Random(args.seed).shuffle(demos)
start = time.perf_counter()
losses = sft(model, tok, [env.prompt(t) + env.demonstration(t) for t in demos], None,
             SFTConfig(steps=args.steps, batch_size=8, lr=3e-4, bf16="auto", seed=args.seed))
run = {"command": "python benchmarks/probes/p11_answer_top.py " + " ".join(
           f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items()),
       **vars(args), "parameters": parameters, "sft_seconds": time.perf_counter() - start,
       "losses": losses, "device": device_name(), "bf16": bf16_is_fast(),
       "threads": torch.get_num_threads(), "split": "validation", "banks": {}}
print(f"sft {args.steps} steps, top {args.train_top or 'all'}: {run['sft_seconds']:.0f} s, loss {losses[0]:.3f} -> {losses[-1]:.3f}")
cfg = RolloutConfig(max_turns=1, max_new_tokens=64, temperature=0.0, batch_size=64, progress=False)
for name, manage in (("oracle", M.oracle), ("append-only", M.append_only), ("last-write-wins", M.last_write_wins)):
    tasks = [x for d in val for x in M.answer_tasks(d, manage(d)[0], name, K)]
    start = time.perf_counter()
    r = evaluate(model, tok, env, tasks, cfg, label_key="kind", dtype="auto")
    run["banks"][name] = {"em": r.accuracy, "by_kind": r.by_label(), "f1": r.mean("f1"), "correct": r.correct,
                          "seconds": time.perf_counter() - start}
    print(name, round(r.accuracy, 3), {k: round(v, 3) for k, v in r.by_label().items()})
runs = json.loads(OUT.read_text())["runs"] if OUT.exists() else []
OUT.write_text(json.dumps({"what": __doc__.strip().splitlines()[0], "runs": runs + [run]}, indent=1) + "\n")
