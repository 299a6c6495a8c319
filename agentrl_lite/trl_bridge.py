"""The same environments, tasks and rewards inside TRL's `GRPOTrainer`: the path to scale up.

Our trainer (`agentrl_lite.grpo`) is for reading and for one machine; TRL runs the same algorithm on many
GPUs with accelerate/DeepSpeed and vLLM. This module translates, so that a comparison is a comparison:

- `trl_config`: our `GRPOConfig` as TRL's, knob for knob (group size, token budget, loss type, clipping,
  beta, iterations, reward scaling, learning rate held constant as ours is);
- `trl_dataset`: the environment's prompts (conversational, as TRL expects) with every task field as a
  column, which TRL hands to the reward functions as keyword lists — exactly what our trainer does;
- `trl_history`: TRL's log history as rows shaped like our trainer's history, for plotting side by side.

The reward functions need no translation: they already have TRL's signature (`agentrl_lite.rewards`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from transformers.trainer_callback import ProgressCallback

from agentrl_lite.grpo import GRPOConfig


class _QuietProgress(ProgressCallback):
    """TRL's progress bar without the metrics dict it prints at every logging step."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        return None

_SAME_NAME = ("loss_type", "epsilon", "epsilon_high", "beta", "num_iterations", "scale_rewards",
              "mask_truncated_completions", "weight_decay", "max_grad_norm", "seed")
"""GRPOConfig fields that TRL's GRPOConfig has under the same name and meaning."""


def trl_config(config: GRPOConfig, output_dir: str, **overrides: Any) -> Any:
    """TRL's `GRPOConfig` for the same experiment as our `config` (single-turn: one turn's token budget).

    Kept equal: prompts × group size per step (one optimizer step per generation batch), completion
    budget, temperature, top_p, no top-k, loss type, epsilon/epsilon_high, beta, num_iterations,
    scale_rewards, mask_truncated_completions, learning rate (constant, no warm-up), weight decay, gradient
    clipping, seed. Left at TRL's defaults (they change speed, not the objective): gradient checkpointing,
    TRL's own sampler and data order. `overrides` go straight to TRL (e.g. `use_cpu=False`).
    """
    from trl import GRPOConfig as TRLGRPOConfig

    r = config.rollout
    args: dict[str, Any] = dict(
        output_dir=output_dir,
        per_device_train_batch_size=config.prompts_per_step * config.group_size,
        gradient_accumulation_steps=1,
        num_generations=config.group_size,
        max_completion_length=r.max_new_tokens * r.max_turns,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=0,
        **{name: getattr(config, name) for name in _SAME_NAME},
        learning_rate=config.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        max_steps=config.steps,
        data_seed=config.seed,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=not config.progress,
        bf16=False,
    )
    args.update(overrides)
    return TRLGRPOConfig(**args)


def trl_dataset(env: Any, tasks: Sequence[dict]) -> Any:
    """A `datasets.Dataset` with a conversational `prompt` column (the environment's messages) and every task
    field as its own column (TRL passes them to the reward functions, e.g. `answer=[...]`)."""
    import datasets

    rows = [{**task, "prompt": env.prompt(task)} for task in tasks]
    return datasets.Dataset.from_list(rows)


def trl_trainer(
    model: Any,
    tokenizer: Any,
    env: Any,
    tasks: Sequence[dict],
    reward_funcs: Sequence[Callable[..., list[float | None]]],
    config: GRPOConfig,
    output_dir: str,
    reward_weights: Sequence[float] | None = None,
    callbacks: Sequence[Any] = (),
    **overrides: Any,
) -> Any:
    """TRL's `GRPOTrainer` on our environment, tasks and rewards with our config translated (`trl_config`)."""
    from trl import GRPOTrainer as TRLGRPOTrainer

    if reward_weights is not None:
        overrides["reward_weights"] = list(reward_weights)
    tools = getattr(env, "tools", None) or None
    if tools and config.rollout.max_turns > 1:
        overrides.setdefault("max_tool_calling_iterations", config.rollout.max_turns - 1)
    args = trl_config(config, output_dir, **overrides)
    trainer = TRLGRPOTrainer(model=model, reward_funcs=list(reward_funcs), args=args,
                             train_dataset=trl_dataset(env, tasks), processing_class=tokenizer,
                             callbacks=list(callbacks), tools=tools if config.rollout.max_turns > 1 else None)
    if config.progress:  # keep TRL's progress bar, without a printed dict per step (use trl_history)
        trainer.remove_callback(ProgressCallback)
        trainer.add_callback(_QuietProgress)
    return trainer


def trl_history(log_history: Sequence[dict[str, Any]]) -> list[dict[str, float]]:
    """TRL's `trainer.state.log_history` as rows like our trainer's history (`step` from 1; training rows only).

    TRL logs the same names we do (reward, reward_std, rewards/<fn>/mean, frac_reward_zero_std,
    completions/mean_length, completions/clipped_ratio, entropy, clip_ratio/*, grad_norm, loss); its
    per-step wall time is not logged, so `step_time` is absent here.
    """
    rows = []
    for entry in log_history:
        if "reward" not in entry or "step" not in entry:
            continue  # the final summary row (train_runtime, ...) has no reward
        row = {"step": int(entry["step"])}
        row.update({k: float(v) for k, v in entry.items()
                    if k != "step" and isinstance(v, (int, float))})
        rows.append(row)
    return rows
