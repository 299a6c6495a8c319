"""The TRL bridge (the whole pipeline, in TRL): the same environments, tasks and rewards inside TRL's
`GRPOTrainer`, the path to scale up.

Our trainer (`agentrl_lite.grpo`) is for reading and for one machine; TRL runs the same algorithm on many
GPUs with accelerate/DeepSpeed and vLLM. This module translates, so that a comparison is a comparison:

- `trl_config`: our `GRPOConfig` as TRL's, knob for knob (group size, token budget, loss type, clipping,
  beta, token or sequence ratios, iterations, reward scaling, learning rate held constant as ours is); a
  setting TRL has no equivalent for is refused with an error, never silently dropped;
- `trl_dataset`: the environment's prompts (conversational, as TRL expects; rendered as text with the task's
  own tool schemas when tasks offer different tools that are never run, as BFCL's do) with every task field as
  a column, which TRL hands to the reward functions as keyword lists — exactly what our trainer does. Fields
  holding lists or dicts are stored as JSON text (Arrow would merge dicts of different keys into one struct
  padded with None) and decoded again before a reward function or an environment sees them;
- `trl_environment_factory`: a multi-turn tool environment as TRL's `environment_factory`: one instance per
  rollout, reset with the task, the environment's tools as its methods, every call run through the task's
  `Toolbox` (`env.toolbox_for(task)`: a malformed call is an `Error: ...` observation, never an exception)
  and recorded; tasks with different tool sets get one factory per set (TRL's `environment` column);
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
import json
import os
import typing
import warnings
from collections.abc import Callable, Sequence
from typing import Any

from transformers.trainer_callback import ProgressCallback, TrainerCallback

from agentrl_lite.chat import ToolCall, render
from agentrl_lite.env import Environment
from agentrl_lite.grpo import GRPOConfig
from agentrl_lite.models import release_memory, resolve_device, use_bf16
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
    "loss_on_tool_tokens": (False, "TRL always leaves the tools' replies out of the loss"),
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


def _rows_per_pass(config: GRPOConfig, world_size: int) -> tuple[int, int]:
    """(TRL's per-device batch, gradient accumulation) so that one optimizer step on `world_size` processes sees
    exactly our batch, prompts_per_step × group_size completions, in passes of at most micro_batch_size rows."""
    batch = config.prompts_per_step * config.group_size
    if batch % world_size:
        raise ValueError(f"prompts_per_step × group_size = {batch} completions cannot be split evenly over "
                         f"{world_size} processes: choose a batch that {world_size} divides.")
    per_process = batch // world_size
    if config.loss.loss_type == "bnpo":  # bnpo normalises by each pass's tokens: one pass per process
        return per_process, 1
    rows = max(r for r in range(1, min(config.micro_batch_size, per_process) + 1) if per_process % r == 0)
    return rows, per_process // rows


def trl_config(config: GRPOConfig, output_dir: str, world_size: int | None = None, **overrides: Any) -> Any:
    """TRL's `GRPOConfig` for the same experiment as our `config` (single-turn: one turn's token budget).

    Kept equal: prompts × group size per step (one optimizer step per generation batch), completion
    budget, temperature, top_p, no top-k, the loss (type, epsilon/epsilon_high, beta, token or sequence
    ratios, KL bias correction), num_iterations, scale_rewards, mask_truncated_completions, learning rate
    (constant, no warm-up), weight decay, gradient clipping, seed, and the rows per loss pass: our
    micro_batch_size bounds TRL's per-device batch, with gradient accumulation over the generation batch
    (TRL's grpo, dr_grpo and dapo losses are the same objective either way, `tests/test_trl_equality.py`; bnpo
    normalises by each pass's tokens, so a bnpo batch stays whole on each process). world_size (default: the
    WORLD_SIZE that `accelerate launch` or `torchrun` sets, else 1) is the number of processes: per-device batch ×
    accumulation × world_size is our batch, so N processes train on the same number of prompts per step as one,
    not N times as many. report_to goes through ("none" for None); mixed precision follows `bf16_loss` (TRL's
    bf16 autocasts the loss pass as ours does; "auto": where bf16 is fast on the device TRL will train on). A 32-row pass holds TRL's fp32 logits of
    every row at once: lesson 06's TRL cell peaked at 13.7 GB that way. Left at TRL's defaults (they change
    speed or memory, not the objective): gradient checkpointing, TRL's own sampler and data order, our token
    cap per pass, sampling batch size, bf16 loss pass, and our bf16 sampling copy with its truncated
    importance weights (`sampler_dtype`, `is_cap`: TRL samples with the policy itself). Refused with a ValueError (TRL has no
    equivalent): credit other than "broadcast", dynamic_sampling, filter_void_turns, skip_empty_updates,
    loss_on_tool_tokens.
    `overrides` go straight to TRL (e.g. `use_cpu=False`).
    """
    from trl import GRPOConfig as TRLGRPOConfig

    _check_translatable(config)
    r = config.rollout
    world_size = world_size or int(os.environ.get("WORLD_SIZE", "1"))
    rows, accumulation = _rows_per_pass(config, world_size)
    on_gpu = not overrides.get("use_cpu", False) and resolve_device().type == "cuda"
    args: dict[str, Any] = dict(
        output_dir=output_dir,
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=accumulation,  # one optimizer step per generation batch, as ours
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
        report_to=config.report_to or "none",
        disable_tqdm=not config.progress,
        bf16=use_bf16(config.bf16_loss, "cuda" if on_gpu else "cpu"),
    )
    args.update(overrides)
    return TRLGRPOConfig(**args)


def nested_fields(tasks: Sequence[dict]) -> list[str]:
    """The task fields that hold a list or a dict in some task: `trl_dataset` stores them as JSON text."""
    return sorted({k for task in tasks for k, v in task.items() if isinstance(v, (list, dict))})


def _decode(row: dict[str, Any], nested: Sequence[str]) -> dict[str, Any]:
    """A dataset row's task fields as the task had them (the JSON text of `nested` fields parsed)."""
    return {k: json.loads(v) if k in nested and isinstance(v, str) else v for k, v in row.items()}


def _schemas_only(toolbox: Toolbox | None) -> bool:
    """Tools the model is shown and never runs (BFCL's functions: `SchemaToolbox`)."""
    return toolbox is not None and not toolbox.functions and bool(toolbox.schemas)


def trl_dataset(env: Environment, tasks: Sequence[dict], tokenizer: Any = None,
                environments: Sequence[str] | None = None, render_tools: bool = False) -> Any:
    """A `datasets.Dataset` with a `prompt` column and every task field as its own column (TRL passes them to the
    reward functions, e.g. `answer=[...]`; fields holding lists or dicts as JSON text, see `nested_fields`).

    The prompt is conversational (the environment's messages), except when the tasks' tools are schemas that
    are never run, which may differ from task to task, or when `render_tools` (a single-turn run of an
    environment with tools: TRL offers no tools then, our rollout still shows them): then it is the text our
    rollout renders (`tokenizer`'s chat template with the task's own tool schemas), which TRL does not template
    again. `environments`: one name per task for TRL's `environment` column (several tool sets, `trl_trainer`)."""
    import datasets

    nested = nested_fields(tasks)
    rows = []
    for i, task in enumerate(tasks):
        prompt: Any = env.prompt(task)
        toolbox = env.toolbox_for(task)
        if _schemas_only(toolbox) or (render_tools and toolbox is not None and toolbox.schemas):
            if tokenizer is None:
                raise ValueError(f"{type(env).__name__}'s tasks show their own tool schemas: pass the tokenizer, "
                                 "which renders each prompt with them.")
            prompt = render(tokenizer, prompt, toolbox.schemas, add_generation_prompt=True)
        row = {k: json.dumps(v) if k in nested else v for k, v in task.items()}
        row["prompt"] = prompt
        if environments is not None:
            row["environment"] = environments[i]
        rows.append(row)
    return datasets.Dataset.from_list(rows)


def with_decoded_fields(reward: Callable[..., list[float | None]],
                        nested: Sequence[str]) -> Callable[..., list[float | None]]:
    """`reward` called with the `nested` task fields parsed back from the JSON text `trl_dataset` stored."""
    if not nested:
        return reward

    def wrapped(prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float | None]:
        for name in nested:
            if name in kwargs:
                kwargs[name] = [json.loads(v) if isinstance(v, str) else v for v in kwargs[name]]
        return reward(prompts, completions, **kwargs)

    wrapped.__name__ = wrapped.__qualname__ = getattr(reward, "__name__", "reward")  # TRL logs rewards/<name>/mean
    wrapped.__doc__ = reward.__doc__
    return wrapped


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
    nested: tuple[str, ...] = ()
    """task fields the dataset stores as JSON text (`nested_fields`), parsed again in `reset`"""

    def __init__(self) -> None:
        self.reset()

    def reset(self, **task: Any) -> None:
        """Start a rollout of `task`. Returns None: the prompt is already in TRL's dataset (`trl_dataset`);
        a string returned here would be appended to the last user message."""
        task.pop("prompt", None)  # the prompt messages TRL's dataset row carries, not a task field
        task.pop("environment", None)  # TRL's routing column (several tool sets), not a task field
        self.task: dict[str, Any] = _decode(task, self.nested)
        self.toolbox: Toolbox | None = self.env.toolbox_for(self.task) if task else None
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


def _tool_sets(env: Environment, tasks: Sequence[dict]) -> tuple[dict[str, Toolbox], list[str | None]]:
    """The distinct sets of executable tools the tasks offer ({name: a toolbox of that set}) and each task's set
    (None for a task without executable tools). A set is named by its tools' names."""
    sets: dict[str, Toolbox] = {}
    per_task: list[str | None] = []
    for task in tasks:
        toolbox = env.toolbox_for(task)
        if toolbox is None or not toolbox.functions:
            per_task.append(None)
            continue
        name = "+".join(toolbox.names)
        sets.setdefault(name, toolbox)
        per_task.append(name)
    if sets and None in per_task:
        raise ValueError(f"Some of {type(env).__name__}'s tasks offer tools and some none: TRL routes every example "
                         "of a multi-turn run to an environment. Train the two kinds of tasks separately.")
    return sets, per_task


def _factory(env: Environment, toolbox: Toolbox, nested: Sequence[str]) -> type[TRLToolEnvironment]:
    """A `TRLToolEnvironment` subclass whose methods are `toolbox`'s tools."""
    methods = {}
    for name, function in toolbox.functions.items():
        if name in _RESERVED or name.startswith("_"):
            raise ValueError(f"A tool named {name!r} cannot be a method of TRL's environment (the name is taken, "
                             "or private, which TRL does not offer as a tool); rename the tool.")
        methods[name] = _tool_method(name, function)
    cls_name = f"{type(env).__name__}ForTRL"
    for method in methods.values():
        method.__qualname__ = f"{cls_name}.{method.__name__}"
    return type(cls_name, (TRLToolEnvironment,), {"env": env, "nested": tuple(nested), **methods})


def trl_environment_factory(env: Environment, tasks: Sequence[dict]) -> type[TRLToolEnvironment]:
    """`env` as TRL's `environment_factory`: a `TRLToolEnvironment` subclass whose methods are `env`'s tools.

    `env.toolbox_for(task)` must give the same executable tools for every task in `tasks` (`ArithmeticEnv`
    with its calculator, for example; tasks with different tool sets: `trl_environment_factories`). The class is
    the factory: TRL calls it with no argument to get one rollout's environment.
    """
    sets, _ = _tool_sets(env, tasks)
    if not sets:
        raise ValueError(
            f"{type(env).__name__}.toolbox_for(task) gives no executable tools; TRL's environment_factory is for "
            "environments with tools. Without tools, call trl_trainer as it is (single-turn), or give the "
            "environment tools (e.g. ArithmeticEnv(tools=[calculator]))."
        )
    if len(sets) > 1:
        raise ValueError(f"{type(env).__name__}'s tasks offer {len(sets)} different tool sets: use "
                         "trl_environment_factories, one factory per set.")
    return _factory(env, next(iter(sets.values())), nested_fields(tasks))


def trl_environment_factories(env: Environment, tasks: Sequence[dict]
                              ) -> tuple[dict[str, type[TRLToolEnvironment]], list[str]]:
    """One factory per tool set the tasks offer, for TRL's `environment_factory={name: factory}`, and each task's
    set name (the dataset's `environment` column; TRL renders each prompt with that set's schemas)."""
    sets, per_task = _tool_sets(env, tasks)
    if not sets:
        raise ValueError(f"{type(env).__name__}.toolbox_for(task) gives no executable tools to any task.")
    nested = nested_fields(tasks)
    return {name: _factory(env, toolbox, nested) for name, toolbox in sets.items()}, per_task  # type: ignore[return-value]


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

    Tools are offered when the environment has executable ones and `config.rollout.max_turns > 1` (up to
    max_turns − 1 rounds of calls, as in our rollouts); tasks with different tool sets are routed to one
    environment factory per set. Tools that are only schemas (BFCL's) are rendered into text prompts
    (`trl_dataset`). Reward functions receive the task fields as the tasks hold them (`with_decoded_fields`). use_environment_factory: run them through
    `trl_environment_factory(env, tasks)` (each call validated by our `Toolbox` and recorded per rollout; reward
    functions receive `environments=[...]`); False hands the raw tool functions to TRL's `tools=`, where a
    malformed call raises inside TRL and comes back as `{"error": ...}`. The tokenizer's chat template must be
    one TRL recognises (`models.tool_chat_template`, which `load_policy` and `tiny_policy` install).
    """
    from trl import GRPOTrainer as TRLGRPOTrainer

    if reward_weights is not None:
        overrides["reward_weights"] = list(reward_weights)
    sets, per_task = _tool_sets(env, tasks)
    multi_turn = bool(sets) and config.rollout.max_turns > 1
    if multi_turn:
        overrides.setdefault("max_tool_calling_iterations", config.rollout.max_turns - 1)
    tool_kwargs: dict[str, Any] = {}
    environments = None
    nested = nested_fields(tasks)
    if multi_turn and use_environment_factory and len(sets) == 1:
        tool_kwargs["environment_factory"] = _factory(env, next(iter(sets.values())), nested)
    elif multi_turn and use_environment_factory:
        tool_kwargs["environment_factory"] = {name: _factory(env, tb, nested) for name, tb in sets.items()}
        environments = per_task
    elif multi_turn and len(sets) == 1:
        tool_kwargs["tools"] = list(next(iter(sets.values())).functions.values())
    elif multi_turn:
        raise ValueError(f"{type(env).__name__}'s tasks offer {len(sets)} different tool sets; TRL's tools= is one "
                         "set for the whole dataset: use use_environment_factory=True.")
    args = trl_config(config, output_dir, **overrides)
    release = [_ReleaseMemory()] if args.use_cpu or resolve_device().type != "cuda" else []  # a GPU run keeps its cache
    trainer = TRLGRPOTrainer(model=model, reward_funcs=[with_decoded_fields(f, nested) for f in reward_funcs],
                             args=args, train_dataset=trl_dataset(env, tasks, tokenizer, environments,
                                                                  render_tools=not multi_turn),
                             processing_class=tokenizer, callbacks=[*release, *callbacks], **tool_kwargs)
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
