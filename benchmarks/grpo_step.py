"""Time one GRPO step of agentrl_lite's trainer and of TRL's GRPOTrainer on the identical configuration.

Same objective, different engineering: ours samples with the rollout engine from a bf16 copy of the policy
(`sampler_dtype="bfloat16"`, corrected by truncated importance sampling, the course's setting) and scores the
loss pass under bf16 autocast (`bf16_loss=True`) without gradient checkpointing; TRL runs with its defaults (fp32, gradient
checkpointing on). Both trainers run in this one process, interleaved: TRL drives its own training loop, and a callback runs
one of our steps right after each TRL step (outside TRL's timed window), so both see the same machine
state. Same model weights, prompts, group size, token budget, loss type, learning rate and reward.

Two configurations:
- single-turn: 1 prompt × 8 completions, ≤48 new tokens, no tools;
- multi-turn: the same with the calculator tool (TRL `tools=`; ours: the rollout engine), ≤2 tool calls,
  from a policy that was first given the cold-start SFT of lesson 01 so that tool calls actually happen.

It also measures rollout throughput (generated tokens/s) at batch 8, 32 and 64, for single-turn episodes and
3-turn episodes with the calculator, with the sampling engine (`engine="kv_cache"`, fp32 weights), the engine
on a bf16 copy of the weights (`kv_cache_bf16`, what the trainer samples with) and `model.generate`
(`engine="generate"`, the old path) interleaved, against this machine's matmul-bound figure (2 × parameters
FLOPs per token at the measured fp32 1024² matmul rate; the bf16 rate is recorded too); and the peak RSS of a
batch-64 rollout with each, each in a fresh process. Usage:

    python benchmarks/grpo_step.py [--steps 4] [--out results/bench/bench_grpo_step.json]
"""

from __future__ import annotations

import argparse
import copy
import shlex
import subprocess
import sys
import tempfile
import time

import datasets
import numpy as np
import torch
from transformers import TrainerCallback

from agentrl_lite.course import seed_everything, write_results
from agentrl_lite.grpo import GRPOConfig, GRPOTrainer
from agentrl_lite.models import load_policy
from agentrl_lite.rewards import as_trl_reward, final_number_reward
from agentrl_lite.rollout import RolloutConfig, rollout
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.arithmetic import ArithmeticEnv
from agentrl_lite.tools import calculator

MAX_NEW_TOKENS = 48
SAMPLER_DTYPE = "bfloat16"
ENGINES = ("generate", "kv_cache", "kv_cache_bf16")
"""old path, the engine on the fp32 policy, the engine on a bf16 copy (the trainer's sampler)"""
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
                        micro_batch_size=GROUP, progress=False, bf16_loss=True, sampler_dtype=SAMPLER_DTYPE,
                        gradient_checkpointing=False,  # as measured in results/bench/bench_grpo_step.json
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
        "ours_sampler_dtype": config.sampler_dtype,
        "ours_is_ratio_mean": float(np.mean([r["sampling/importance_sampling_ratio/mean"] for r in callback.our_rows
                                             if "sampling/importance_sampling_ratio/mean" in r] or [np.nan])),
        "timed_steps": len(trl_s),
    }


def matmul_gflops(dtype: torch.dtype = torch.float32) -> float:
    a, b = torch.randn(1024, 1024, dtype=dtype), torch.randn(1024, 1024, dtype=dtype)
    for _ in range(3):
        a @ b
    start, n = time.perf_counter(), 20
    for _ in range(n):
        a @ b
    return 2 * 1024**3 * n / (time.perf_counter() - start) / 1e9


def rollout_throughput(model, tokenizer, env, tasks, batch: int, engine: str, max_turns: int = 1) -> dict:
    """Generated tokens per second of one rollout of `batch` episodes (one per distinct task), and its stops.

    engine: one of ENGINES; for "kv_cache_bf16" pass the bf16 copy as `model`."""
    config = RolloutConfig(max_turns=max_turns, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, batch_size=batch,
                           progress=False, engine=engine.removesuffix("_bf16"))
    chosen = tasks[:batch]
    start = time.perf_counter()
    episodes = rollout(model, tokenizer, [env.prompt(t) for t in chosen], [env.toolbox_for(t) for t in chosen], config)
    seconds = time.perf_counter() - start
    tokens = sum(ep.num_model_tokens for ep in episodes)
    return {"tokens_per_s": tokens / seconds, "seconds": seconds, "generated_tokens": tokens,
            "model_turns_per_episode": float(np.mean([len(ep.model_turns) for ep in episodes]))}


def peak_rss_of_rollout(engine: str, batch: int = 64) -> dict:
    """Peak resident memory of a fresh process that loads the model and runs one batch-`batch` rollout, and of one
    that only loads the model (so the difference is the rollout's)."""
    out = {}
    for label, code in (("model_only", "pass"), ("rollout", f"rollout_for_rss({engine!r}, {batch})")):
        # VmHWM, not getrusage: a child's ru_maxrss starts at its parent's resident size, which fork copies
        script = ("import re, sys; sys.path.insert(0, 'benchmarks'); from grpo_step import rollout_for_rss; "
                  f"{code}; print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))")
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
        out[f"{label}_peak_rss_mb"] = int(result.stdout.strip().splitlines()[-1]) / 1024
    out["rollout_extra_mb"] = out["rollout_peak_rss_mb"] - out["model_only_peak_rss_mb"]
    return out


def rollout_for_rss(engine: str, batch: int) -> None:
    """A batch-`batch` single-turn rollout of distinct tasks (the measured work of `peak_rss_of_rollout`)."""
    torch.manual_seed(0)
    model, tokenizer = load_policy()
    if engine.endswith("_bf16"):  # as in the trainer: the fp32 policy stays, a bf16 copy samples
        model = copy.deepcopy(model).to(torch.bfloat16)
    env = ArithmeticEnv(tools=[])
    tasks = read_jsonl(DATA_DIR / "arithmetic_train.jsonl")[:batch]
    rollout(model, tokenizer, [env.prompt(t) for t in tasks], None,
            RolloutConfig(max_turns=1, max_new_tokens=MAX_NEW_TOKENS, batch_size=batch, progress=False,
                          engine=engine.removesuffix("_bf16")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="timed steps per trainer (after one warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", default="bench_grpo_step", help="results/<name>.json")
    parser.add_argument("--memory-only", action="store_true",
                        help="only the peak RSS of a batch-64 rollout per engine (results/<name>.json)")
    args = parser.parse_args()
    if args.memory_only:
        metrics = {"peak_rss_batch64": {engine: peak_rss_of_rollout(engine) for engine in ENGINES}}
        print(metrics)
        path = write_results(args.name, metrics, profile="cpu", model="SmolLM2-135M-Instruct (embedded)",
                             seed=args.seed, command="python " + " ".join(shlex.quote(a) for a in sys.argv))
        print("wrote", path)
        return
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
    metrics["matmul_gflops_bf16"] = matmul_gflops(torch.bfloat16)
    metrics["matmul_bound_bf16_tokens_per_s"] = metrics["matmul_gflops_bf16"] * 1e9 / flops_per_token
    sampler = copy.deepcopy(model).to(torch.bfloat16)
    calculator_env = ArithmeticEnv()
    throughput: dict = {}
    for batch in (8, 32, 64):
        for turns, env in ((1, no_tools), (3, calculator_env)):
            for engine in ENGINES:  # interleaved: the same machine state for each
                row = rollout_throughput(sampler if engine.endswith("_bf16") else model, tokenizer, env, tasks,
                                         batch, engine, turns)
                throughput[f"batch{batch}_turns{turns}_{engine}"] = row
            old = throughput[f"batch{batch}_turns{turns}_generate"]
            for engine in ENGINES[1:]:
                new = throughput[f"batch{batch}_turns{turns}_{engine}"]
                new["speedup_over_generate"] = new["tokens_per_s"] / old["tokens_per_s"]
                new["share_of_matmul_bound"] = new["tokens_per_s"] / metrics["matmul_bound_tokens_per_s"]
            print(f"batch {batch}, {turns} turn(s): " + ", ".join(
                f"{e} {throughput[f'batch{batch}_turns{turns}_{e}']['tokens_per_s']:.0f} tok/s" for e in ENGINES),
                flush=True)
    metrics["rollout_throughput"] = throughput
    metrics["rollout_share_of_matmul_bound_batch32"] = throughput["batch32_turns1_kv_cache_bf16"]["share_of_matmul_bound"]
    metrics["rollout_share_of_matmul_bound_batch32_fp32_weights"] = \
        throughput["batch32_turns1_kv_cache"]["share_of_matmul_bound"]
    metrics["rollout_share_of_bf16_matmul_bound_batch32"] = \
        throughput["batch32_turns1_kv_cache_bf16"]["tokens_per_s"] / metrics["matmul_bound_bf16_tokens_per_s"]
    metrics["peak_rss_batch64"] = {engine: peak_rss_of_rollout(engine) for engine in ENGINES}
    print("peak RSS:", metrics["peak_rss_batch64"], flush=True)

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
