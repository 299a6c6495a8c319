"""Train any lesson's environment outside a notebook, with our trainer or with TRL's: the path to bigger models
and many GPUs (`agentrl-lite train`, or `python -m agentrl_lite.course.train`)::

    agentrl-lite train --env search --trainer ours --model embedded --steps 8
    accelerate launch --config_file configs/accelerate/ddp.yaml -m agentrl_lite.course.train \\
        --env search --trainer trl --model Qwen/Qwen2.5-1.5B-Instruct --steps 200 --prompts 8 --group 8

Each environment family comes with the training data, reward functions and turn and token budgets of its lesson
(`RECIPES`); the command-line options set the run's size. `--trainer ours` is single-process (our trainer has no
data parallelism: it refuses WORLD_SIZE > 1); `--trainer trl` runs TRL's GRPOTrainer through `trl_bridge`, on as
many processes as `accelerate launch` or `torchrun` starts, with DeepSpeed, FSDP or vLLM as their configurations
and `--vllm` say (docs/scale.md). Both save the trained policy in Hugging Face's format under `--output-dir`.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentrl_lite.tasks import DATA_DIR, read_jsonl


@dataclass
class Recipe:
    """What a lesson trains an environment family on."""

    lesson: str
    """the notebook that teaches it"""
    build: Callable[[], tuple[Any, list[dict], list[Callable], list[float]]]
    """() -> (environment, training tasks, reward functions, reward weights)"""
    max_turns: int
    max_new_tokens: int
    extra: dict[str, Any] = field(default_factory=dict)
    """GRPOConfig settings the lesson uses besides the run's size"""


def _arithmetic() -> tuple:
    from agentrl_lite.rewards import correctness_reward
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv
    from agentrl_lite.tools import calculator

    return ArithmeticEnv(tools=[calculator]), read_jsonl(DATA_DIR / "arithmetic_train.jsonl"), [correctness_reward], [1.0]


def _word_problems() -> tuple:
    from agentrl_lite.rewards import correctness_reward
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv
    from agentrl_lite.tools import calculator

    return (ArithmeticEnv(tools=[calculator]), read_jsonl(DATA_DIR / "word_problems_train.jsonl"),
            [correctness_reward], [1.0])


def _function_calls() -> tuple:
    from agentrl_lite.rewards import tool_call_reward
    from agentrl_lite.tasks.function_calls import FunctionCallEnv

    return FunctionCallEnv(), read_jsonl(DATA_DIR / "toolcall_train.jsonl"), [tool_call_reward], [1.0]


def _search() -> tuple:
    from agentrl_lite.rewards import exact_match_reward, format_reward
    from agentrl_lite.tasks.search import SearchEnv
    from agentrl_lite.tools import SearchIndex

    env = SearchEnv(SearchIndex(read_jsonl(DATA_DIR / "search_corpus.jsonl")))
    return env, read_jsonl(DATA_DIR / "search_train.jsonl"), [exact_match_reward, format_reward], [1.0, 0.2]


def _kernels() -> tuple:
    from agentrl_lite.tasks.kernels.env import KernelEnv, kernel_tasks

    env = KernelEnv(shape="cpu")
    return env, kernel_tasks("train"), [env.reward], [1.0]


def _memory() -> tuple:
    from agentrl_lite.tasks.memory import MemoryManagerEnv, manager_reward, manager_tasks

    return MemoryManagerEnv(), manager_tasks(read_jsonl(DATA_DIR / "memory_train.jsonl")), [manager_reward], [1.0]


def _sql() -> tuple:
    from agentrl_lite.tasks.sql import SqlEnv, execution_match_reward

    return SqlEnv(), read_jsonl(DATA_DIR / "sql_train.jsonl"), [execution_match_reward], [1.0]


RECIPES: dict[str, Recipe] = {
    "arithmetic": Recipe("01_tool_calling", _arithmetic, max_turns=3, max_new_tokens=64),
    "word_problems": Recipe("06_multi_turn_agentic_grpo", _word_problems, max_turns=3, max_new_tokens=40),
    "function_calls": Recipe("05_rl_for_tool_calls", _function_calls, max_turns=1, max_new_tokens=128),
    "search": Recipe("09_agentic_search", _search, max_turns=3, max_new_tokens=40, extra={"stratify_by": "kind"}),
    "kernels": Recipe("10_kernel_generation_rl", _kernels, max_turns=1, max_new_tokens=240),
    "memory": Recipe("11_memory_agents", _memory, max_turns=1, max_new_tokens=64, extra={"scale_rewards": "none"}),
    "sql": Recipe("12_sql_agent", _sql, max_turns=3, max_new_tokens=120, extra={"stratify_by": "kind"}),
}
"""environment family -> its lesson's data, rewards and budgets"""


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="agentrl-lite train", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--env", required=True, choices=sorted(RECIPES), help="the environment family (its lesson's data)")
    p.add_argument("--trainer", default="ours", choices=("ours", "trl"), help="our GRPOTrainer or TRL's (default ours)")
    p.add_argument("--model", default="embedded", help='"embedded" (SmolLM2-135M-Instruct), a hub id or a local path; '
                   '"tiny" for a random two-layer model (tests)')
    p.add_argument("--output-dir", required=True, help="the metrics log and the trained policy (Hugging Face format)")
    p.add_argument("--steps", type=int, default=8, help="optimizer steps")
    p.add_argument("--prompts", type=int, default=4, help="prompts per step")
    p.add_argument("--group", type=int, default=8, help="completions per prompt (GRPO's group)")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--max-turns", type=int, default=None, help="model turns per episode (default: the lesson's)")
    p.add_argument("--max-new-tokens", type=int, default=None, help="tokens per turn (default: the lesson's)")
    p.add_argument("--tasks", type=int, default=None, help="train on the first this many tasks only")
    p.add_argument("--lora-r", type=int, default=None, help="train a LoRA adapter of this rank on every linear layer")
    p.add_argument("--bf16", default="auto", choices=("auto", "true", "false"), help="bf16 loss pass (TRL: bf16)")
    p.add_argument("--report-to", default=None, choices=("tensorboard", "trackio"))
    p.add_argument("--vllm", default=None, choices=("colocate", "server"), help="TRL only: sample with vLLM")
    p.add_argument("--seed", type=int, default=0)
    return p


def config_from(args: argparse.Namespace):
    """The run's GRPOConfig: the lesson's budgets and settings, the command line's size."""
    from agentrl_lite.grpo import GRPOConfig
    from agentrl_lite.rollout import RolloutConfig

    recipe = RECIPES[args.env]
    bf16: bool | str = {"auto": "auto", "true": True, "false": False}[args.bf16]
    rollout = RolloutConfig(max_turns=args.max_turns or recipe.max_turns,
                            max_new_tokens=args.max_new_tokens or recipe.max_new_tokens, temperature=1.0,
                            progress=False)
    return GRPOConfig(steps=args.steps, prompts_per_step=args.prompts, group_size=args.group, lr=args.lr,
                      seed=args.seed, bf16_loss=bf16, report_to=args.report_to, output_dir=args.output_dir,
                      rollout=rollout, **recipe.extra)


def run(args: argparse.Namespace) -> Path:
    """Train as `args` say; return the folder holding the trained policy (Hugging Face format)."""
    from agentrl_lite.models import load_policy, resolve_device, tiny_policy

    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if args.trainer == "ours" and world_size > 1:
        raise SystemExit("--trainer ours runs in one process (our trainer has no data parallelism); launch "
                         "--trainer trl on several processes instead.")
    if args.vllm and args.trainer != "trl":
        raise SystemExit("--vllm is a setting of TRL's trainer: add --trainer trl.")
    env, tasks, rewards, weights = RECIPES[args.env].build()
    tasks = tasks[:args.tasks] if args.tasks else tasks
    config = config_from(args)
    lora = {"r": args.lora_r, "lora_alpha": 2 * args.lora_r, "target_modules": "all-linear"} if args.lora_r else None
    if args.model == "tiny":
        model, tokenizer = tiny_policy(seed=args.seed)
        if lora is not None:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **lora))
    else:
        model, tokenizer = load_policy(None if args.model == "embedded" else args.model, lora=lora)
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if args.trainer == "ours":
        from agentrl_lite.grpo import GRPOTrainer

        trainer = GRPOTrainer(model, tokenizer, env, tasks, rewards, config, reward_weights=weights)
        trainer.train()
        return trainer.save_checkpoint(out / "final")
    from agentrl_lite.trl_bridge import trl_trainer

    overrides: dict[str, Any] = {}
    if args.vllm:
        overrides.update(use_vllm=True, vllm_mode=args.vllm)
    if args.model == "tiny" or resolve_device().type != "cuda":
        overrides["use_cpu"] = True
    trainer = trl_trainer(model, tokenizer, env, tasks, rewards, config, str(out / "trl"), reward_weights=weights,
                          **overrides)
    trainer.train()
    trainer.save_model(str(out / "final"))
    if trainer.accelerator.is_main_process:
        tokenizer.save_pretrained(out / "final")
        (out / "final" / "trl_log_history.json").write_text(json.dumps(trainer.state.log_history))
    return out / "final"


def main(argv: list[str] | None = None) -> None:
    print("trained policy:", run(parser().parse_args(argv)))


if __name__ == "__main__":
    main()
