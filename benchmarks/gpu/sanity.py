"""GPU plumbing check, run before a gpu-profile run (benchmarks/gpu/README.md): a tiny random Llama with the embedded
tokenizer goes through cold-start SFT, two GRPO steps with the course preset (bf16 sampling copy, bf16 loss pass),
a greedy evaluation and one step of TRL's trainer, all on CUDA. Exits non-zero when a stage fails or when
training leaves the weights where they were (a bf16 master copy rounds RL's small steps away).

Usage: python benchmarks/gpu/sanity.py TOKENIZER_DIR [--cpu]   (--cpu: check the script itself on a machine without one)
"""

from __future__ import annotations

import sys
import tempfile
import time

import torch
from transformers import AutoTokenizer

from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.evaluate import evaluate
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.models import tiny_policy
from agentrl_lite.rewards import final_number_reward
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.arithmetic import ArithmeticEnv
from agentrl_lite.trl_bridge import trl_trainer


def spread_reward(prompts, completions, **kwargs):
    """A reward with spread inside every group whatever a random model writes, so GRPO's steps are not skipped."""
    return [float(len(str(completion)) % 2) for completion in completions]


def main(tokenizer_dir: str, device: str = "cuda") -> int:
    assert device == "cpu" or torch.cuda.is_available(), "no CUDA device"
    print("device:", torch.cuda.get_device_name(0) if device == "cuda" else "cpu", "torch", torch.__version__)
    model, tokenizer = tiny_policy(vocab_from=AutoTokenizer.from_pretrained(tokenizer_dir), init_std=0.5)
    model = model.to(device)
    env = ArithmeticEnv(tools=[], instructions="Answer with a number.")
    tasks = read_jsonl(DATA_DIR / "small_arithmetic_train.jsonl")[:16]
    start = {n: p.detach().clone() for n, p in model.named_parameters()}
    t = time.perf_counter()
    rows = [env.prompt(task) + [{"role": "assistant", "content": str(task["answer"])}] for task in tasks[:8]]
    losses = sft(model, tokenizer, rows, config=SFTConfig(steps=2, batch_size=4, lr=1e-4, seed=0, progress=False))
    print(f"sft: losses {losses} in {time.perf_counter() - t:.1f} s, dtype {next(model.parameters()).dtype}")
    config = grpo_preset(dict(steps=2, prompts=2, group=4, lr=1e-5), 0, max_turns=1, max_new_tokens=8)
    start = {n: p.detach().clone() for n, p in model.named_parameters()}  # GRPO's own steps must move the weights
    trainer = GRPOTrainer(model, tokenizer, env, tasks, [spread_reward], config)
    print("sampler:", None if trainer.sampler is None else next(trainer.sampler.parameters()).dtype)
    t = time.perf_counter()
    history = trainer.train()
    print(f"grpo: {len(history)} steps in {time.perf_counter() - t:.1f} s;",
          [{k: r.get(k) for k in ("reward", "grad_norm", "update_skipped")} for r in history])
    moved = sum(int((p.detach() != start[n]).any()) for n, p in model.named_parameters())
    print(f"tensors moved by GRPO at lr 1e-5: {moved} of {len(start)}")
    report = evaluate(model, tokenizer, env, tasks[:8], RolloutConfig(max_turns=1, max_new_tokens=8, temperature=0.0))
    print("evaluate:", report.metrics()["accuracy"])
    with tempfile.TemporaryDirectory() as out:
        trl = trl_trainer(model, tokenizer, env, tasks, [final_number_reward],
                          grpo_preset(dict(steps=1, prompts=2, group=4, lr=1e-5), 0, max_turns=1, max_new_tokens=8,
                                      skip_empty_updates=False),
                          out, use_cpu=device == "cpu")
        trl.train()
        print("trl: device", trl.args.device, "loss", trl.state.log_history[-1].get("train_loss"))
    return 0 if moved else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], "cpu" if "--cpu" in sys.argv else "cuda"))
