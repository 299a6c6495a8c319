"""Which sampling copy of the policy, where bf16 is slow? The measurement behind `models.fast_sampler_dtype`.

The GRPO trainer samples with a copy of the fp32 policy and corrects for the difference with truncated
importance sampling; evaluation with `dtype="auto"` answers with the same copy. This samples arithmetic prompts
at temperature 1 (48 tokens, one turn) with each copy, at batch 4 and 32, and records:

- tokens per second (the copies interleaved round by round, so that all see the same machine state);
- how far the copy's log-probs of its own samples are from the fp32 policy's (|Δ log π| per sampled token), and
  the importance weights π_policy / π_copy the trainer would apply (their range, and the share outside [1/2, 2]).

Copies: "fp32" (the policy itself), "bfloat16" (a cast copy), "fp16_weights" and "int8" (`quantize.packed_copy`).
Run it with AGENTRL_FORCE_FP32=1 to record the choice on a machine without fast bf16 (the file says which). Usage:

    python benchmarks/sampler_copies.py [--rounds 2]     # writes results/bench/bench_sampler_copies.json
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time

import numpy as np
import torch

from agentrl_lite.course import write_results
from agentrl_lite.logprobs import token_logprobs
from agentrl_lite.models import FORCE_FP32, bf16_is_fast, fast_sampler_dtype, load_policy, sampling_copy
from agentrl_lite.rollout import RolloutConfig, rollout_env
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.arithmetic import ArithmeticEnv

COPIES = ("fp32", "bfloat16", "fp16_weights", "int8")
BATCHES = (4, 32)


def gap(model, episodes) -> torch.Tensor:
    """log π_policy − log π_copy for every sampled token of `episodes` (the copy's log-probs are recorded)."""
    out = []
    for ep in episodes:
        ids, mask = torch.tensor([ep.token_ids]), torch.tensor([ep.model_mask])
        with torch.no_grad():
            policy = token_logprobs(model, ids, torch.ones_like(ids), mask, 1.0)[0][mask[0].bool()]
        out.append(policy - torch.tensor(ep.logprobs)[mask[0].bool()])
    return torch.cat(out)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=2)
    args = p.parse_args()
    model, tokenizer = load_policy(None)
    env = ArithmeticEnv()
    tasks = read_jsonl(DATA_DIR / "arithmetic_train.jsonl")[: max(BATCHES)]
    samplers = {name: (model if name == "fp32" else sampling_copy(model, name)) for name in COPIES}
    config = RolloutConfig(max_turns=1, max_new_tokens=48, temperature=1.0, batch_size=64, progress=False)
    speed: dict[str, list[float]] = {}
    gaps: dict[str, torch.Tensor] = {}
    for round_ in range(args.rounds):
        for batch in BATCHES:
            for name, sampler in samplers.items():
                torch.manual_seed(round_)
                start = time.perf_counter()
                episodes = rollout_env(sampler, tokenizer, env, tasks[:batch], config)
                seconds = time.perf_counter() - start
                speed.setdefault(f"{name}_batch{batch}", []).append(
                    sum(e.num_model_tokens for e in episodes) / seconds)
                if batch == max(BATCHES) and round_ == 0:
                    gaps[name] = gap(model, episodes)
    metrics: dict = {"bf16_is_fast": bf16_is_fast("cpu"), "forced_fp32": os.environ.get(FORCE_FP32, "") not in ("", "0"),
                     "auto_sampler": fast_sampler_dtype("cpu"), "threads": torch.get_num_threads(),
                     "max_new_tokens": config.max_new_tokens, "rounds": args.rounds}
    for name in COPIES:
        delta = gaps[name]
        weights = delta.exp()
        row = {f"tokens_per_s_batch{b}": float(np.median(speed[f"{name}_batch{b}"])) for b in BATCHES}
        row.update({"logp_difference_mean": delta.abs().mean().item(), "logp_difference_max": delta.abs().max().item(),
                    "importance_ratio_min": weights.min().item(), "importance_ratio_max": weights.max().item(),
                    "share_outside_half_to_two": ((weights < 0.5) | (weights > 2)).float().mean().item(),
                    "tokens_compared": delta.numel()})
        metrics[name] = row
        print(f"{name}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items()), flush=True)
    forced = f"{FORCE_FP32}={os.environ[FORCE_FP32]} " if FORCE_FP32 in os.environ else ""
    write_results("bench_sampler_copies", metrics, profile="cpu", model="SmolLM2-135M-Instruct (embedded)", seed=0,
                  command=forced + "python " + " ".join(shlex.quote(x) for x in sys.argv))


if __name__ == "__main__":
    main()
