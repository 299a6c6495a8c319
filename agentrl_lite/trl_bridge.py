"""The TRL bridge (the whole pipeline, in TRL): the same environments, tasks and rewards inside TRL's
`GRPOTrainer`, the path to scale up.

Our trainer (`agentrl_lite.grpo`) is for reading and for one machine; TRL runs the same algorithm on many
GPUs with accelerate/DeepSpeed and vLLM. This module translates, so that a comparison is a comparison:

- `trl_config`: our `GRPOConfig` as TRL's, knob for knob (group size, token budget, loss type, clipping,
  beta, token or sequence ratios, iterations, reward scaling, learning rate held constant as ours is); a
  setting TRL has no equivalent for is refused with an error, never silently dropped;
- `trl_dataset`: the environment's prompts (conversational, as TRL expects) with every task field as a
  column, which TRL hands to the reward functions as keyword lists — exactly what our trainer does;
- `trl_environment_factory`: a multi-turn tool environment as TRL's `environment_factory`: one instance per
  rollout, reset with the task, the environment's tools as its methods, every call run through the task's
  `Toolbox` (`env.toolbox_for(task)`: a malformed call is an `Error: ...` observation, never an exception)
  and recorded;
- `trl_trainer`: TRL's `GRPOTrainer` built from all of the above;
- `trl_history`: TRL's log history as rows shaped like our trainer's history, for plotting side by side.

The reward functions need no translation: they already have TRL's signature (`agentrl_lite.rewards`). In a
multi-turn run TRL passes each completion as messages, `[{"role": "assistant", "content": ..., "tool_calls":
[...]}, {"role": "tool", ...}, ..., {"role": "assistant", "content": "<answer>391</answer>"}]`, which
`rewards.completion_text` reads as the policy's text only; `with_environment_tool_calls` hands a reward the
number of calls each rollout's environment ran (for `otc_reward`).
"""

from __future__ import annotations

import inspect
import typing
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from transformers.trainer_callback import ProgressCallback, TrainerCallback

from agentrl_lite.chat import ToolCall
from agentrl_lite.env import Environment
from agentrl_lite.grpo import GRPOConfig
from agentrl_lite.models import release_memory
from agentrl_lite.tools import Toolbox

# TRL 1.16 reads `model.is_gradient_checkpointing`, which transformers 5.23 deprecates with a FutureWarning at every
# training step (dozens per notebook). The call is TRL's, not ours, and harmless: keep it out of the learner's way.
warnings.filterwarnings("ignore", message="`is_gradient_checkpointing` is deprecated", category=FutureWarning)
# Likewise TRL's config sets `gradient_checkpointing`, which transformers 5.23 renames (a FutureWarning per config).
warnings.filterwarnings("ignore", message="`gradient_checkpointing` is deprecated", category=FutureWarning)


class _QuietProgress(ProgressCallback):
    """TRL's progress bar without the metrics dict it prints at every logging step."""

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        return None


class _ReleaseMemory(TrainerCallback):
    """Hand freed pages back to the operating system after every step and at the end (`models.release_memory`),
    as our trainer does, so both trainers are measured the same way."""

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        release_memory()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        release_memory()


_SAME_NAME = ("num_iterations", "scale_rewards", "mask_truncated_completions", "weight_decay", "max_grad_norm",
              "seed")
"""GRPOConfig fields that TRL's GRPOConfig has under the same name and meaning"""
_SAME_NAME_LOSS = ("loss_type", "epsilon", "epsilon_high", "beta", "importance_sampling_level",
                   "use_bias_correction_kl")
"""LossConfig fields that TRL's GRPOConfig has under the same name and meaning"""
_NOT_IN_TRL = {
    "credit": ("broadcast", "TRL gives every token of a completion the episode's advantage (broadcast)"),
    "dynamic_sampling": (False, "TRL 1.16 has no DAPO dynamic sampling"),
    "filter_void_turns": (False, "TRL has no SimpleTIR void-turn filter"),
    "skip_empty_updates": (False, "TRL steps AdamW even when every advantage is 0"),
}
"""our settings TRL cannot reproduce: field → (the only value that translates, why)"""


def _check_translatable(config: GRPOConfig) -> None:
    """Raise when `config` asks for something TRL's GRPOTrainer would silently not do."""
    refused = [f"{name}={getattr(config, name)!r} ({why})" for name, (neutral, why) in _NOT_IN_TRL.items()
               if getattr(config, name) != neutral]
    if config.loss.max_completion_length not in (None, config.rollout.max_new_tokens * config.rollout.max_turns):
        refused.append(f"loss.max_completion_length={config.loss.max_completion_length} (TRL's dr_grpo normaliser "
                       "is the generation budget, max_new_tokens × max_turns)")
    if refused:
        raise ValueError("trl_config cannot translate " + "; ".join(refused) + ". Set them to their neutral "
                         "values (e.g. dataclasses.replace(config, credit='broadcast', skip_empty_updates=False)) "
                         "for a like-for-like TRL run.")


def trl_config(config: GRPOConfig, output_dir: str, **overrides: Any) -> Any:
    """TRL's `GRPOConfig` for the same experiment as our `config` (single-turn: one turn's token budget).

    Kept equal: prompts × group size per step (one optimizer step per generation batch), completion
    budget, temperature, top_p, no top-k, the loss (type, epsilon/epsilon_high, beta, token or sequence
    ratios, KL bias correction), num_iterations, scale_rewards, mask_truncated_completions, learning rate
    (constant, no warm-up), weight decay, gradient clipping, seed, and the rows per loss pass: our
    micro_batch_size becomes TRL's per-device batch with gradient accumulation over the generation batch
    (TRL's grpo, dr_grpo and dapo losses are the same objective either way, `tests/test_trl_equality.py`; bnpo
    normalises by each pass's tokens, so a bnpo batch stays whole). A 32-row pass holds TRL's fp32 logits of
    every row at once: lesson 06's TRL cell peaked at 13.7 GB that way. Left at TRL's defaults (they change
    speed or memory, not the objective): gradient checkpointing, TRL's own sampler and data order, our token
    cap per pass, sampling batch size, bf16 loss pass, and our bf16 sampling copy with its truncated
    importance weights (`sampler_dtype`, `is_cap`: TRL samples with the policy itself). Refused with a ValueError (TRL has no
    equivalent): credit other than "broadcast", dynamic_sampling, filter_void_turns, skip_empty_updates.
    `overrides` go straight to TRL (e.g. `use_cpu=False`).
    """
    from trl import GRPOConfig as TRLGRPOConfig

    _check_translatable(config)
    r = config.rollout
    batch = config.prompts_per_step * config.group_size
    rows = batch if config.loss.loss_type == "bnpo" or batch % config.micro_batch_size else config.micro_batch_size
    args: dict[str, Any] = dict(
        output_dir=output_dir,
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=batch // rows,  # one optimizer step per generation batch, as ours
        num_generations=config.group_size,
        max_completion_length=r.max_new_tokens * r.max_turns,
        temperature=r.temperature,
        top_p=r.top_p,
        top_k=0,
        **{name: getattr(config, name) for name in _SAME_NAME},
        **{name: getattr(config.loss, name) for name in _SAME_NAME_LOSS},
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


def trl_dataset(env: Environment, tasks: Sequence[dict]) -> Any:
    """A `datasets.Dataset` with a conversational `prompt` column (the environment's messages) and every task
    field as its own column (TRL passes them to the reward functions, e.g. `answer=[...]`)."""
    import datasets

    rows = [{**task, "prompt": env.prompt(task)} for task in tasks]
    return datasets.Dataset.from_list(rows)


class TRLToolEnvironment:
    """One rollout of a tool environment inside TRL's `GRPOTrainer(environment_factory=...)`.

    Do not instantiate this class: `trl_environment_factory(env)` builds a subclass with `env`'s tools as
    methods. How TRL 1.16 uses it (trl/trainer/grpo_trainer.py):
    - it calls the factory with no argument, one instance per rollout in a batch, and reuses the instances
      from batch to batch (so all state is set in `reset`);
    - before each rollout it calls `reset(**row)` with the whole dataset row: `prompt` and every task column;
    - every public method except `reset` and `get_reward` is a tool: its name, type hints and Google-style
      docstring become the schema rendered into the prompt, and TRL calls it with the arguments the model
      wrote, as keywords. A public helper here would be offered to the model as a tool, hence the private
      `_call` and the property below;
    - reward functions receive the instances, aligned with `completions`, as `environments=[...]`.

    Attributes set by `reset`: `task` (the dataset row without `prompt`), `toolbox` (a fresh
    `env.toolbox_for(task)`), `calls` (one `{"name", "arguments", "observation"}` per call the tools ran, in order).
    """

    env: Environment | None = None
    """the environment whose rollouts these are (set on the subclass by `trl_environment_factory`)"""

    def __init__(self) -> None:
        self.reset()

    def reset(self, **task: Any) -> None:
        """Start a rollout of `task`. Returns None: the prompt is already in TRL's dataset (`trl_dataset`);
        a string returned here would be appended to the last user message."""
        task.pop("prompt", None)  # the prompt messages TRL's dataset row carries, not a task field
        self.task: dict[str, Any] = task
        self.toolbox: Toolbox | None = self.env.toolbox_for(task) if task else None
        self.calls: list[dict[str, Any]] = []

    @property
    def num_tool_calls(self) -> int:
        """How many tool calls this rollout ran (m in OTC's tool-efficiency reward)."""
        return len(self.calls)

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        """Run one call through the toolbox (validated against the schema; errors come back as text) and record it."""
        if self.toolbox is None:
            raise RuntimeError("reset(**task) must be called before a tool: the task decides the toolbox.")
        observation = self.toolbox.execute(ToolCall(name, arguments))
        self.calls.append({"name": name, "arguments": arguments, "observation": observation})
        return observation


_RESERVED = {*dir(TRLToolEnvironment), "get_reward", "task", "toolbox", "calls"}
"""names a tool cannot have: TRL's hooks and the environment's own attributes"""


def _tool_method(name: str, function: Callable[..., Any]) -> Callable[..., str]:
    """A method `name(self, <function's parameters>)` that runs `function` through the rollout's toolbox.

    It carries the function's signature, type hints and docstring, so the schema TRL renders is the one our
    `Toolbox` renders. It accepts any keywords: a wrong argument reaches the toolbox, which answers with an
    `Error: ...` observation instead of the TypeError a plain function call would raise.
    """
    signature = inspect.signature(function)
    parameter_names = list(signature.parameters)

    def method(self: TRLToolEnvironment, *args: Any, **kwargs: Any) -> str:
        if len(args) > len(parameter_names):  # only a person calls with positions; TRL passes keywords
            raise TypeError(f"{name}() takes {len(parameter_names)} arguments, got {len(args)} positional ones.")
        return self._call(name, {**dict(zip(parameter_names, args, strict=False)), **kwargs})

    receiver = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    method.__name__ = name
    method.__doc__ = function.__doc__
    method.__signature__ = signature.replace(parameters=[receiver, *signature.parameters.values()])  # type: ignore[attr-defined]
    method.__annotations__ = typing.get_type_hints(function)  # resolved here: no string annotations to evaluate later
    return method


def _toolbox(env: Environment, tasks: Sequence[dict]) -> Toolbox | None:
    """The toolbox `env` offers, which TRL needs to be the same for every task (its tools are the methods
    of one class, or one `tools=` list)."""
    toolboxes = [env.toolbox_for(t) for t in tasks]
    names = {tuple(tb.names) if tb is not None else None for tb in toolboxes}
    if len(names) > 1:
        raise ValueError(f"{type(env).__name__} offers different tools per task; TRL's environment_factory and "
                         "tools= need one set of tools for the whole dataset.")
    return toolboxes[0] if toolboxes else None


def trl_environment_factory(env: Environment, tasks: Sequence[dict]) -> type[TRLToolEnvironment]:
    """`env` as TRL's `environment_factory`: a `TRLToolEnvironment` subclass whose methods are `env`'s tools.

    `env.toolbox_for(task)` must give the same executable tools for every task in `tasks` (`ArithmeticEnv`
    with its calculator, for example). The class is the factory: TRL calls it with no argument to get one
    rollout's environment.
    """
    toolbox = _toolbox(env, tasks)
    if toolbox is None or not toolbox.functions:
        raise ValueError(
            f"{type(env).__name__}.toolbox_for(task) returned {toolbox!r}, not a Toolbox of executable tools; TRL's "
            "environment_factory is for environments with tools. Without tools, call trl_trainer as it is "
            "(single-turn), or give the environment tools (e.g. ArithmeticEnv(tools=[calculator]))."
        )
    methods = {}
    for name, function in toolbox.functions.items():
        if name in _RESERVED or name.startswith("_"):
            raise ValueError(f"A tool named {name!r} cannot be a method of TRL's environment (the name is taken, "
                             "or private, which TRL does not offer as a tool); rename the tool.")
        methods[name] = _tool_method(name, function)
    cls_name = f"{type(env).__name__}ForTRL"
    for method in methods.values():
        method.__qualname__ = f"{cls_name}.{method.__name__}"
    return type(cls_name, (TRLToolEnvironment,), {"env": env, **methods})


def with_environment_tool_calls(reward: Callable[..., list[float | None]]) -> Callable[..., list[float | None]]:
    """`reward` called with `tool_calls=[...]`: the number of calls each rollout's environment ran, read from
    the `environments` TRL passes to reward functions when it runs an `environment_factory`.

    For `otc_reward` (OTC's tool efficiency). Without it, `otc_reward` counts the calls in the completion
    (`rewards.count_tool_calls`), which also counts calls that were written but not run: unparseable blocks,
    and calls in the last turn when the turn limit (`max_tool_calling_iterations`) was reached.
    """

    def wrapped(prompts: Sequence[Any], completions: Sequence[Any], environments: Sequence[Any] | None = None,
                **kwargs: Any) -> list[float | None]:
        if environments is None:
            raise ValueError(f"{reward.__name__} reads tool calls from TRL's environments, but none were passed: "
                             "train with trl_trainer(..., use_environment_factory=True) on an environment with tools.")
        tool_calls = [e.num_tool_calls for e in environments]
        return reward(prompts, completions, tool_calls=tool_calls, environments=environments, **kwargs)

    wrapped.__name__ = wrapped.__qualname__ = reward.__name__  # TRL logs rewards/<name>/mean
    wrapped.__doc__ = reward.__doc__
    return wrapped


def trl_trainer(
    model: Any,
    tokenizer: Any,
    env: Environment,
    tasks: Sequence[dict],
    reward_funcs: Sequence[Callable[..., list[float | None]]],
    config: GRPOConfig,
    output_dir: str,
    reward_weights: Sequence[float] | None = None,
    callbacks: Sequence[Any] = (),
    use_environment_factory: bool = True,
    **overrides: Any,
) -> Any:
    """TRL's `GRPOTrainer` on our environment, tasks and rewards with our config translated (`trl_config`).

    Tools are offered when the environment has some and `config.rollout.max_turns > 1` (up to max_turns − 1
    rounds of calls, as in our rollouts). use_environment_factory: run them through
    `trl_environment_factory(env, tasks)` (each call validated by our `Toolbox` and recorded per rollout; reward
    functions receive `environments=[...]`); False hands the raw tool functions to TRL's `tools=`, where a
    malformed call raises inside TRL and comes back as `{"error": ...}`. The tokenizer's chat template must be
    one TRL recognises (`models.tool_chat_template`, which `load_policy` and `tiny_policy` install).
    """
    from trl import GRPOTrainer as TRLGRPOTrainer

    if reward_weights is not None:
        overrides["reward_weights"] = list(reward_weights)
    toolbox = _toolbox(env, tasks)
    multi_turn = toolbox is not None and bool(toolbox.functions) and config.rollout.max_turns > 1
    if multi_turn:
        overrides.setdefault("max_tool_calling_iterations", config.rollout.max_turns - 1)
    tool_kwargs: dict[str, Any] = {}
    if multi_turn and use_environment_factory:
        tool_kwargs["environment_factory"] = trl_environment_factory(env, tasks)
    elif multi_turn:
        tool_kwargs["tools"] = list(toolbox.functions.values())
    args = trl_config(config, output_dir, **overrides)
    trainer = TRLGRPOTrainer(model=model, reward_funcs=list(reward_funcs), args=args,
                             train_dataset=trl_dataset(env, tasks), processing_class=tokenizer,
                             callbacks=[_ReleaseMemory(), *callbacks], **tool_kwargs)
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
