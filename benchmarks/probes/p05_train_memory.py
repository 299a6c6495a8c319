"""Lesson 05 probe: peak memory and time of its cold start and of a few GRPO steps, in one process.

Runs the lesson's cpu SFT (4 steps of 8 demonstrations, bf16 autocast where the CPU runs bf16 natively) and then
`--grpo-steps` steps of its fine-reward GRPO run (the course preset, `--micro-batch-size` rows per loss pass). A
thread reads the process's resident memory every 10 ms. `--old-shapes` restores the shapes before 2026-11-28 for
an A/B in one session: the engine's attention reads exactly the written key columns (KEY_SPAN_STEP 1), loss passes
run at every width (SHAPE_STEP 1), and the sampler keeps its weights during the update.

    python benchmarks/probes/p05_train_memory.py --out results/notes/05_probes/train_memory_rows4.json
    python benchmarks/probes/p05_train_memory.py --micro-batch-size 2 --out results/notes/05_probes/train_memory_rows2.json
    python benchmarks/probes/p05_train_memory.py --old-shapes --out results/notes/05_probes/train_memory_old_shapes.json

The committed results train_memory_{old_shapes,rows4,rows2}.json ran at commit c53c011, when loss passes also
ran in steps of 32 tokens (`logprobs.SHAPE_STEP`, the prefix rounded down too); that padding was taken out after (it
slowed lessons whose rows are short, results/notes/05_rl_for_tool_calls.md). Check that commit out to reproduce them.
On 2026-11-29 a pass under bf16 autocast on a CPU could pad again, by steps relative to the width
(`logprobs.REPEAT_SHAPES`, `--relative-steps` here, commit 83127dd); it was taken out once capping oneDNN's and
ideep's kernel caches (agentrl_lite/__init__.py) made a new shape cost no memory.
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path

from p09_step_time import rss_mb  # resident memory, as the other probes read it

import agentrl_lite.engine as engine
from agentrl_lite import seed_everything
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.course.results import current_command, device_name
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.models import bf16_is_fast, load_policy
from agentrl_lite.rewards import exact_match_tool_reward, tool_call_reward, tool_format_reward
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, bfcl, read_jsonl
from agentrl_lite.tasks.function_calls import FunctionCallEnv


class Peak:
    """The highest resident memory since the last `reset`, read every 10 ms by a thread."""

    def __init__(self) -> None:
        self.value = 0.0
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            self.value = max(self.value, rss_mb())
            time.sleep(0.01)

    def reset(self) -> None:
        self.value = rss_mb()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grpo-steps", type=int, default=3)
    parser.add_argument("--micro-batch-size", type=int, default=4, help="lesson 05 passes 4 rows")
    parser.add_argument("--old-shapes", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="results/notes/05_probes/train_memory.json")
    args = parser.parse_args()
    if args.old_shapes:
        engine.KEY_SPAN_STEP = 1
        GRPOTrainer._park_sampler = lambda self: None
    began = time.perf_counter()
    peak = Peak()
    seed_everything(args.seed)
    model, tokenizer = load_policy()
    env = FunctionCallEnv()
    demos = read_jsonl(DATA_DIR / "toolcall_sft.jsonl")
    conversations = [env.prompt(d)[:1] + d["demonstration"] for d in demos]
    tools = [[bfcl.tool_schema(f) for f in d["functions"]] for d in demos]
    peak.reset()
    start = time.perf_counter()
    losses = sft(model, tokenizer, conversations, tools,
                 SFTConfig(steps=4, batch_size=8, lr=1e-4, bf16="auto", seed=args.seed, progress=False))
    sft_row = {"seconds": round(time.perf_counter() - start, 1), "peak_rss_mb": round(peak.value),
               "rss_after_mb": round(rss_mb()), "losses": [round(x, 4) for x in losses]}
    print("SFT", sft_row, flush=True)
    budget = dict(steps=args.grpo_steps, prompts=4, group=8, lr=5e-6)  # lesson 05's cpu budget, fewer steps
    config = grpo_preset(budget, args.seed, max_turns=1, max_new_tokens=128, micro_batch_size=args.micro_batch_size)
    trainer = GRPOTrainer(model, tokenizer, env, read_jsonl(DATA_DIR / "toolcall_train.jsonl"),
                          [tool_format_reward, exact_match_tool_reward, tool_call_reward], config, [1.0, 0.0, 1.0])
    peak.reset()
    start = time.perf_counter()
    history = trainer.train()
    grpo_row = {"seconds": round(time.perf_counter() - start, 1), "peak_rss_mb": round(peak.value),
                "rss_after_mb": round(rss_mb()), "step_seconds": [round(r["step_time"], 1) for r in history],
                "reward": [round(r["reward"], 3) for r in history]}
    print("GRPO", grpo_row, flush=True)
    out = {"command": current_command(), "device": device_name(), "bf16_is_fast": bf16_is_fast("cpu"),
           "seed": args.seed, "profile": "cpu", "micro_batch_size": args.micro_batch_size,
           "old_shapes": args.old_shapes,
           "key_span_step": engine.KEY_SPAN_STEP,
           "sft": sft_row, "grpo": grpo_row, "seconds": round(time.perf_counter() - began, 1),
           "contended": False}
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print("wrote", args.out)


if __name__ == "__main__":
    main()
