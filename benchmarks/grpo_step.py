"""Time one GRPO step of agentrl_lite's trainer and of TRL's GRPOTrainer on the identical configuration.

Same objective, different engineering: ours samples with the rollout engine and scores the loss pass under
bf16 autocast (`bf16_loss=True`) without gradient checkpointing; TRL runs with its defaults (fp32, gradient
checkpointing on). Both trainers run in this one process, interleaved: TRL drives its own training loop, and a callback runs
one of our steps right after each TRL step (outside TRL's timed window), so both see the same machine
state. Same model weights, prompts, group size, token budget, loss type, learning rate and reward.

Two configurations:
- single-turn: 1 prompt × 8 completions, ≤48 new tokens, no tools;
- multi-turn: the same with the calculator tool (TRL `tools=`; ours: the rollout engine), ≤2 tool calls,
  from a policy that was first given the cold-start SFT of lesson 01 so that tool calls actually happen.

It also measures rollout throughput (generated tokens/s) at batch 8 and 32 against this machine's
matmul-bound figure. Usage:

    python benchmarks/grpo_step.py [--steps 4] [--out results/bench_grpo_step.json]
"""

from __future__ import annotations

import argparse
import copy
import shlex
import sys
import tempfile
import time

import datasets
import numpy as np
import torch
from transformers import TrainerCallback

from agentrl_lite import seed_everything, write_results
from agentrl_lite.grpo import GRPOConfig, GRPOTrainer
from agentrl_lite.models import load_policy
from agentrl_lite.rewards import as_trl_reward, final_number_reward
from agentrl_lite.rollout import RolloutConfig, rollout
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.arithmetic import ArithmeticEnv
from agentrl_lite.tools import calculator

MAX_NEW_TOKENS = 48
GROUP = 8
LR = 1e-6


correct = as_trl_reward(final_number_reward, "correct")
"""1.0 when the last number the policy wrote is the gold answer"""


class Interleave(TrainerCallback):
    """Times TRL's steps; after each one, runs and times one of ours."""

    def __init__(self, ours: GRPOTrainer):
        self.ours, self.trl_times, self.our_times, self.our_rows, self.trl_sampling = ours, [], [], [], []

    def on_step_begin(self, args, state, control, **kw):
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.trl_times.append(time.perf_counter() - self.start)
        start = time.perf_counter()
        self.our_rows.append(self.ours.step())
        self.our_times.append(time.perf_counter() - start)


def bench(model, tokenizer, tasks, env, tools, steps: int, max_turns: int) -> dict:
    from trl import GRPOConfig as TRLConfig
    from trl import GRPOTrainer as TRLTrainer

    ours_model = copy.deepcopy(model)
    config = GRPOConfig(steps=steps, prompts_per_step=1, group_size=GROUP, lr=LR,  # dapo: LossConfig's default
                        micro_batch_size=GROUP, progress=False, bf16_loss=True,
                        rollout=RolloutConfig(max_turns=max_turns, max_new_tokens=MAX_NEW_TOKENS,
                                              temperature=1.0, batch_size=GROUP, progress=False))
    ours = GRPOTrainer(ours_model, tokenizer, env, tasks, [correct], config)
    dataset = datasets.Dataset.from_list([{"prompt": env.prompt(t), "answer": t["answer"]} for t in tasks])
    with tempfile.TemporaryDirectory() as tmp:
        args = TRLConfig(output_dir=tmp, per_device_train_batch_size=GROUP, num_generations=GROUP,
                         max_completion_length=MAX_NEW_TOKENS * max_turns, learning_rate=LR, loss_type="dapo",
                         beta=0.0, temperature=1.0, max_steps=steps + 1, logging_steps=1, report_to="none",
                         use_cpu=True, bf16=False, save_strategy="no", seed=0,
                         **({"max_tool_calling_iterations": max_turns - 1} if tools else {}))
        callback = Interleave(ours)
        trainer = TRLTrainer(model=copy.deepcopy(model), reward_funcs=[correct], args=args, train_dataset=dataset,
                             processing_class=tokenizer, callbacks=[callback], tools=tools or None)
        generate_and_score = trainer._generate_and_score_completions

        def timed(*a, **kw):  # where TRL's step time goes: sampling + rewards vs the loss pass and update
            start = time.perf_counter()
            out = generate_and_score(*a, **kw)
            callback.trl_sampling.append(time.perf_counter() - start)
            return out

        trainer._generate_and_score_completions = timed
        trainer.train()
    trl_s, our_s = callback.trl_times[1:], callback.our_times[1:]  # the first step of each warms up
    our_tokens = [r["completions/mean_length"] * GROUP for r in callback.our_rows[1:]]
    return {
        "trl_seconds_per_step": float(np.mean(trl_s)),
        "ours_seconds_per_step": float(np.mean(our_s)),
        "speedup": float(np.mean(trl_s) / np.mean(our_s)),
        "trl_sampling_seconds": float(np.mean(callback.trl_sampling[1:])),
        "trl_update_seconds": float(np.mean(trl_s) - np.mean(callback.trl_sampling[1:])),
        "ours_sampling_seconds": float(np.mean([r["time/sampling"] for r in callback.our_rows[1:]])),
        "ours_update_seconds": float(np.mean([r["time/update"] for r in callback.our_rows[1:]])),
        "trl_step_times": trl_s,
        "ours_step_times": our_s,
        "ours_generated_tokens_per_step": float(np.mean(our_tokens)),
        "ours_tool_calls_per_episode": float(np.mean([r["tools/call_frequency"] for r in callback.our_rows])),
        "trl_gradient_checkpointing": bool(args.gradient_checkpointing),
        "ours_bf16_loss": config.bf16_loss,
        "timed_steps": len(trl_s),
    }


def matmul_gflops() -> float:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    start, n = time.perf_counter(), 20
    for _ in range(n):
        a @ b
    return 2 * 1024**3 * n / (time.perf_counter() - start) / 1e9


def rollout_throughput(model, tokenizer, env, tasks, batch: int) -> float:
    config = RolloutConfig(max_turns=1, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, batch_size=batch,
                           progress=False)
    prompts = [env.prompt(t) for t in tasks[:batch]]
    start = time.perf_counter()
    episodes = rollout(model, tokenizer, prompts, None, config)
    return sum(ep.num_model_tokens for ep in episodes) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per trainer (after one warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="bench_grpo_step", help="results/<name>.json")
    args = parser.parse_args()
    torch.set_num_threads(torch.get_num_threads())
    seed_everything(args.seed)
    model, tokenizer = load_policy()
    tasks = read_jsonl(DATA_DIR / "arithmetic_train.jsonl")[:64]
    metrics: dict = {"group_size": GROUP, "max_new_tokens_per_turn": MAX_NEW_TOKENS, "loss_type": "dapo",
                     "torch_threads": torch.get_num_threads()}

    no_tools = ArithmeticEnv(tools=[])
    metrics["single_turn"] = bench(model, tokenizer, tasks, no_tools, [], args.steps, max_turns=1)
    print("single-turn:", {k: v for k, v in metrics["single_turn"].items() if not isinstance(v, list)}, flush=True)

    flops_per_token = 2 * sum(p.numel() for p in model.parameters())
    gflops = matmul_gflops()
    metrics["matmul_gflops"] = gflops
    metrics["matmul_bound_tokens_per_s"] = gflops * 1e9 / flops_per_token
    for batch in (8, 32):
        metrics[f"rollout_tokens_per_s_batch{batch}"] = rollout_throughput(model, tokenizer, no_tools, tasks, batch)
    print({k: v for k, v in metrics.items() if "tokens_per_s" in k or "gflops" in k}, flush=True)

    env = ArithmeticEnv()
    demos = [[{"role": "system", "content": env.system_prompt}] + d["messages"]
             for d in read_jsonl(DATA_DIR / "arithmetic_sft.jsonl")[:32]]
    sft(model, tokenizer, demos, env.toolbox_for().schemas, SFTConfig(steps=4, batch_size=8, lr=1e-4,
                                                                        progress=False))
    metrics["multi_turn_tools"] = bench(model, tokenizer, tasks, env, [calculator], args.steps, max_turns=3)
    print("multi-turn:", {k: v for k, v in metrics["multi_turn_tools"].items() if not isinstance(v, list)})

    command = "python " + " ".join(shlex.quote(a) for a in sys.argv)
    path = write_results(args.name, metrics, profile="cpu", model="SmolLM2-135M-Instruct (embedded)",
                         seed=args.seed, command=command)
    print("wrote", path)


if __name__ == "__main__":
    main()
