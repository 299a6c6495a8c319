import os
PROFILE = "cpu"  # smoke | cpu | gpu | auto
SEED = 0
MODEL = None  # None = embedded SmolLM2-135M-Instruct; or a hub id / local path

import copy
import math
import random
import time

import matplotlib.pyplot as plt
import numpy as np
import torch

from agentrl_lite import resolve_profile, seed_everything, write_results
from agentrl_lite.data import DATA_DIR, calculator_demonstration, read_jsonl
from agentrl_lite.envs import ANSWER_FORMAT, ArithmeticEnv
from agentrl_lite.grpo import GRPOConfig, GRPOTrainer
from agentrl_lite.models import load_policy
from agentrl_lite.rewards import as_trl_reward, correctness_reward, otc_reward, otc_tool_score, tool_productivity
from agentrl_lite.rl import group_advantages
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.viz import plot_curves, show_episode, show_table, trajectory_viewer
from agentrl_lite.word_problems import evaluate_word_problems

PROFILE = resolve_profile(PROFILE)
seed_everything(SEED)
BUDGET = {
    "smoke": dict(n_heldout=4, sft_steps=2, sft_batch=4, probe_questions=2, steps=1, prompts=2, group=4, lr=2e-5),
    "cpu": dict(n_heldout=32, sft_steps=8, sft_batch=8, probe_questions=16, steps=10, prompts=4, group=8, lr=2e-05),
    "gpu": dict(n_heldout=64, sft_steps=8, sft_batch=8, probe_questions=32, steps=60, prompts=8, group=8, lr=1e-5),
}[PROFILE]
TURNS, TOKENS = 2, 48  # a call and the answer, or the answer straight away (a call is about 30 tokens)
print(f"profile={PROFILE}", BUDGET)
if PROFILE == "smoke":
    print("SMOKE RUN: a handful of held-out questions, two SFT steps, one GRPO step per reward. "
          "The numbers prove the plumbing, not the method.")
CLOCK = time.perf_counter()

def labelled(rows, kind):
    return [{**r, "template": kind} for r in rows]  # `template` is the label the evaluation groups by


def interleave(a, b):
    return [x for pair in zip(a, b) for x in pair]


easy_train = labelled(read_jsonl(DATA_DIR / "identity_arithmetic_train.jsonl"), "easy")
hard_train = labelled(read_jsonl(DATA_DIR / "arithmetic_train.jsonl"), "hard")
half = BUDGET["n_heldout"] // 2
heldout = interleave(labelled(read_jsonl(DATA_DIR / "identity_arithmetic_heldout.jsonl"), "easy")[:half],
                     labelled(read_jsonl(DATA_DIR / "arithmetic_heldout.jsonl"), "hard")[:half])
rng = random.Random(SEED)
demo_easy, demo_hard = easy_train[:32], hard_train[:32]  # cold-start demonstrations come from here …
train_tasks = interleave(rng.sample(easy_train[32:], 150), rng.sample(hard_train[32:], 150))  # … RL from the rest
print(f"{len(train_tasks)} RL training questions, {len(heldout)} held-out ({half} easy + {half} hard)")
print([t["question"] for t in heldout[:6]])

CALL_SHARE = 0.0  # share of easy-question demonstrations that call the calculator anyway
INSTRUCTIONS = f"You are a careful assistant. Call a tool only when you need it. {ANSWER_FORMAT}"


def demonstration(task, call):
    if call:  # question, calculator call, result, answer
        return calculator_demonstration(task)
    return [{"role": "user", "content": task["question"]},
            {"role": "assistant", "content": f"<answer>{task['answer']}</answer>"}]


n_call = round(CALL_SHARE * len(demo_easy))
demos = [demonstration(t, True) for t in demo_hard] + [demonstration(t, i < n_call) for i, t in enumerate(demo_easy)]
model, tokenizer = load_policy(MODEL)
env = ArithmeticEnv(instructions=INSTRUCTIONS)  # the calculator tool, the <answer> format, strict scoring
conversations = [env.prompt({"question": ""})[:1] + d for d in demos]
start = time.perf_counter()
sft_losses = sft(model, tokenizer, conversations, env.make_toolbox().schemas,
                 SFTConfig(steps=BUDGET["sft_steps"], batch_size=BUDGET["sft_batch"], lr=1e-4, bf16=True, seed=SEED))
sft_seconds = time.perf_counter() - start
print(f"SFT on {len(demos)} demonstrations ({len(demo_hard)} hard, all calling; {len(demo_easy)} easy, "
      f"{n_call} calling): {BUDGET['sft_steps']} steps in {sft_seconds:.0f} s, loss {[round(x, 3) for x in sft_losses]}")
sft_state = copy.deepcopy(model.state_dict())

EVAL = RolloutConfig(max_turns=TURNS, max_new_tokens=TOKENS, temperature=0.0, batch_size=64, progress=False)


def report_row(stage, report):
    m = report.metrics()
    return {"policy": stage, "accuracy": m["accuracy"], "easy": m["by_template"]["easy"],
            "hard": m["by_template"]["hard"], "calls/question": m["calls_per_problem"],
            "calls (easy)": m["calls_by_template"]["easy"], "calls (hard)": m["calls_by_template"]["hard"],
            "TP": m["tool_productivity"]}


sft_report = evaluate_word_problems(model, tokenizer, env, heldout, EVAL)
show_table([report_row("after SFT", sft_report)])
show_episode(sft_report.episodes[0], tokenizer)

import json, sys, random as _r
VARIANT = json.loads(sys.argv[1])
class Balanced(GRPOTrainer):
    def next_tasks(self, n):
        if not hasattr(self, "_pools"):
            rng = _r.Random(SEED)
            self._rng = rng
            self._pools = {k: [] for k in ("easy", "hard")}
        out = []
        for i in range(n):
            k = ("easy", "hard")[i % 2]
            if not self._pools[k]:
                pool = [t for t in self.tasks if t["template"] == k]
                self._pools[k] = self._rng.sample(pool, len(pool))
            out.append(self._pools[k].pop())
        return out

otc_fn = as_trl_reward(otc_reward, "otc", group_size=BUDGET["group"])
correct_fn = as_trl_reward(correctness_reward, "correct")
cfg = GRPOConfig(steps=BUDGET["steps"], prompts_per_step=BUDGET["prompts"], group_size=BUDGET["group"],
                 lr=VARIANT.get("lr", BUDGET["lr"]), loss_type="dapo", bf16_loss=True, micro_batch_size=16, seed=SEED,
                 skip_empty_updates=True, scale_rewards=VARIANT.get("scale", "group"), beta=VARIANT.get("beta", 0.0),
                 rollout=RolloutConfig(max_turns=TURNS, max_new_tokens=TOKENS, temperature=1.0, batch_size=64, progress=False))
cls = Balanced if VARIANT.get("balanced") else GRPOTrainer
seed_everything(SEED)
trainer = cls(model, tokenizer, env, train_tasks, [correct_fn, otc_fn], cfg, reward_weights=[0.0, 1.0])
hist = trainer.train()
for h in hist:
    print({k: (round(v, 3) if isinstance(v, float) else v) for k, v in h.items() if k in ("step","rewards/correct/mean","rewards/otc/mean","tools/call_frequency","frac_reward_zero_std")})
rep = evaluate_word_problems(model, tokenizer, env, heldout, EVAL)
print("VARIANT", VARIANT, "HELDOUT", report_row("OTC", rep))
