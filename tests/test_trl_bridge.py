"""The TRL bridge: our config translated knob for knob, our tasks as TRL's dataset, TRL's logs as our rows,
our tool environment as TRL's environment_factory, and real TRL GRPOTrainer runs on a tiny model through
the bridge (single-turn, and multi-turn with the calculator)."""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import replace
from types import SimpleNamespace

import pytest
import torch
from transformers.utils import get_json_schema

from agentrl_lite.grpo import GRPOConfig
from agentrl_lite.loss import LossConfig
from agentrl_lite.models import tiny_policy
from agentrl_lite.rewards import (
    as_trl_reward,
    correctness_reward,
    final_number_reward,
    format_reward,
    otc_reward,
)
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.arithmetic import ArithmeticEnv
from agentrl_lite.tools import Toolbox, calculator
from agentrl_lite.trl_bridge import (
    trl_config,
    trl_dataset,
    trl_environment_factory,
    trl_history,
    trl_trainer,
    with_environment_tool_calls,
)

CONFIG = GRPOConfig(steps=2, prompts_per_step=2, group_size=4, num_iterations=2, scale_rewards="none",
                    mask_truncated_completions=True, lr=3e-5, seed=7, progress=False,
                    loss=LossConfig(loss_type="dr_grpo", epsilon=0.1, epsilon_high=0.28, beta=0.0,
                                    importance_sampling_level="sequence", use_bias_correction_kl=False),
                    rollout=RolloutConfig(max_turns=1, max_new_tokens=12, temperature=0.9, progress=False))


def test_config_is_translated_knob_for_knob(tmp_path):
    args = trl_config(CONFIG, str(tmp_path), use_cpu=True)
    assert args.per_device_train_batch_size == 8 and args.num_generations == 4
    assert args.gradient_accumulation_steps == 1 and args.max_steps == 2
    # our micro-batches become TRL's passes, still one optimizer step per generation batch of 2 × 4 rows
    split = trl_config(replace(CONFIG, micro_batch_size=2), str(tmp_path), use_cpu=True)
    assert (split.per_device_train_batch_size, split.gradient_accumulation_steps) == (2, 4)
    assert split.generation_batch_size == 8 and split.steps_per_generation == 4
    bnpo = replace(CONFIG, micro_batch_size=2, loss=replace(CONFIG.loss, loss_type="bnpo"))
    assert trl_config(bnpo, str(tmp_path), use_cpu=True).per_device_train_batch_size == 8, "bnpo: one pass"
    odd = trl_config(replace(CONFIG, micro_batch_size=3), str(tmp_path), use_cpu=True)  # the largest divisor of 8 ≤ 3
    assert (odd.per_device_train_batch_size, odd.gradient_accumulation_steps) == (2, 4)
    assert args.max_completion_length == 12 and args.temperature == 0.9 and args.top_k == 0
    assert (args.loss_type, args.epsilon, args.epsilon_high, args.beta) == ("dr_grpo", 0.1, 0.28, 0.0)
    assert args.importance_sampling_level == "sequence" and args.use_bias_correction_kl is False  # GSPO
    assert args.num_iterations == 2 and args.scale_rewards == "none" and args.mask_truncated_completions
    assert args.learning_rate == 3e-5 and args.lr_scheduler_type == "constant" and args.warmup_steps == 0
    assert args.seed == 7


@pytest.mark.parametrize("setting", [dict(credit="discounted", gamma=0.4), dict(credit="step_group"),
                                     dict(dynamic_sampling=True), dict(filter_void_turns=True),
                                     dict(skip_empty_updates=True), dict(loss_on_tool_tokens=True),
                                     dict(loss=LossConfig(loss_type="dr_grpo", max_completion_length=99))])
def test_a_setting_trl_cannot_reproduce_is_refused_not_dropped(tmp_path, setting):
    with pytest.raises(ValueError, match=f"cannot translate {next(iter(setting))}"):
        trl_config(replace(CONFIG, **setting), str(tmp_path), use_cpu=True)


def test_dataset_has_conversational_prompts_and_task_columns():
    env = ArithmeticEnv(tools=[], instructions="Be brief.")
    tasks = read_jsonl(DATA_DIR / "small_arithmetic_train.jsonl")[:3]
    ds = trl_dataset(env, tasks)
    assert ds[0]["prompt"] == [{"role": "system", "content": "Be brief."},
                               {"role": "user", "content": tasks[0]["question"]}]
    assert ds["answer"] == [t["answer"] for t in tasks]


def test_history_keeps_training_rows_only():
    log = [{"loss": 0.0, "reward": 0.5, "frac_reward_zero_std": 0.5, "step": 1, "learning_rate": 1e-5},
           {"reward": 0.75, "step": 2, "entropy": 1.2},
           {"train_runtime": 3.0, "step": 2}]
    rows = trl_history(log)
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["reward"] == 0.75 and rows[0]["loss"] == 0.0


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("micro_batch_size", [8, 2])  # 2: four accumulated passes per optimizer step
def test_trl_runs_our_env_and_reward_with_a_tiny_model(tmp_path, micro_batch_size):
    model, tokenizer = tiny_policy(seed=0, init_std=0.5)
    env = ArithmeticEnv(tools=[], instructions="Answer.")
    tasks = read_jsonl(DATA_DIR / "small_arithmetic_train.jsonl")[:8]
    calls = []

    def reward(prompts, completions, answer, **kwargs):
        calls.append((len(completions), list(answer)))
        # the tiny model never answers right; a length term gives the groups spread, hence a gradient
        return [r + 0.01 * len(c[-1]["content"]) for r, c in
                zip(final_number_reward(prompts, completions, answer=answer), completions, strict=True)]

    config = GRPOConfig(steps=2, prompts_per_step=2, group_size=4, lr=1e-4, progress=False,
                        micro_batch_size=micro_batch_size,
                        rollout=RolloutConfig(max_turns=1, max_new_tokens=8, progress=False))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = trl_trainer(model, tokenizer, env, tasks, [reward], config, str(tmp_path), use_cpu=True)
    assert trainer.args.gradient_accumulation_steps == 8 // micro_batch_size
    trainer.train()
    rows = trl_history(trainer.state.log_history)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(0.0 <= r["reward"] <= 1.0 and "frac_reward_zero_std" in r for r in rows)
    assert [n for n, _ in calls] == [8, 8]  # prompts × group per step, and the task column reached the reward
    assert all(set(a) <= {t["answer"] for t in tasks} for _, a in calls)
    changed = [n for n, p in model.named_parameters() if not p.detach().equal(before[n])]
    assert changed, "TRL's optimizer step did not change the model"


def test_environment_factory_runs_the_env_tools_and_never_raises():
    factory = trl_environment_factory(ArithmeticEnv(), [{"question": "q", "answer": "1"}])
    environment = factory()  # TRL calls the factory with no argument
    tools = [n for n, _ in inspect.getmembers(factory, predicate=inspect.isfunction)
             if n not in ("reset", "get_reward") and not n.startswith("_")]
    assert tools == ["calculator"]  # exactly what TRL offers the model: no helper leaks out as a tool
    assert get_json_schema(environment.calculator) == Toolbox([calculator]).schemas[0]

    assert environment.reset(prompt=[{"role": "user", "content": "q"}], question="What is 17 * 23?",
                             answer="391") is None  # TRL appends a returned string to the prompt
    assert environment.task == {"question": "What is 17 * 23?", "answer": "391"}
    assert environment.calculator(expression="17 * 23") == "391"
    assert environment.calculator(expression=17).startswith("Error: calculator: argument 'expression' must be a string")
    assert environment.calculator(expr="1").startswith("Error: calculator got an unexpected argument 'expr'")
    assert environment.calculator().startswith("Error: calculator is missing the required argument 'expression'")
    assert environment.num_tool_calls == 4 and environment.calls[0] == {
        "name": "calculator", "arguments": {"expression": "17 * 23"}, "observation": "391"}
    environment.reset(question="What is 2 + 2?", answer="4")  # instances are reused across batches
    assert environment.calls == [] and environment.task == {"question": "What is 2 + 2?", "answer": "4"}

    with pytest.raises(ValueError, match="environment_factory is for environments with tools"):
        trl_environment_factory(ArithmeticEnv(tools=[]), [{"question": "q", "answer": "1"}])


def test_rewards_read_trl_multi_turn_completions():
    """A completion as TRL 1.16 builds it after a tool round: structured call, tool result, final answer."""
    completion = [
        {"role": "assistant", "content": "",
         "tool_calls": [{"type": "function", "function": {"name": "calculator", "arguments": {"expression": "17*23"}}}]},
        {"role": "tool", "name": "calculator", "content": "<answer>391</answer>"},  # the tool's text never counts
        {"role": "assistant", "content": "<answer>391</answer>"},
    ]
    cheat = completion[:2] + [{"role": "assistant", "content": "I am done."}]
    assert correctness_reward([[]] * 2, [completion, cheat], answer=["391", "391"]) == [1.0, 0.0]
    assert format_reward([[]], [completion]) == [1.0]
    environments = [SimpleNamespace(num_tool_calls=m) for m in (1, 3)]
    seen = {}

    def reward(prompts, completions, tool_calls, **kwargs):
        seen["tool_calls"] = tool_calls
        return [0.0] * len(completions)

    with_environment_tool_calls(reward)([[]] * 2, [completion] * 2, environments=environments)
    assert seen["tool_calls"] == [1, 3]  # the counts the environments recorded, not the completions' (1, 1)


EXPRESSION = re.compile(r"What is (.+?)\?")
TOOL_RESULT = re.compile(r"<tool_response>\n(.*?)\n</tool_response>", re.DOTALL)


def scripted_generate(tokenizer):
    """A stand-in for `model.generate` that writes a fixed policy, so that the test knows what TRL must do.

    Even rows call the calculator on the question's expression, then answer with its result (right);
    odd rows answer 0 at once (wrong). Only sampling is scripted: TRL still scores these tokens with the
    real model and updates it.
    """

    def generate(input_ids, attention_mask, **kwargs):
        replies = []
        for row, (ids, mask) in enumerate(zip(input_ids, attention_mask, strict=True)):
            text = tokenizer.decode(ids[mask.bool()])
            if results := TOOL_RESULT.findall(text):
                reply = f"<answer>{results[-1]}</answer><|im_end|>"
            elif row % 2 == 0:
                call = {"name": "calculator", "arguments": {"expression": EXPRESSION.findall(text)[-1]}}
                reply = f"<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>"
            else:
                reply = "<answer>0</answer><|im_end|>"
            replies.append(tokenizer(reply, add_special_tokens=False)["input_ids"])
        width = max(map(len, replies))
        new = torch.tensor([r + [tokenizer.pad_token_id] * (width - len(r)) for r in replies])
        return torch.cat([input_ids, new.to(input_ids.device)], dim=1)

    return generate


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore")
def test_trl_runs_our_tool_env_through_environment_factory(tmp_path):
    model, tokenizer = tiny_policy(seed=0)
    model.generate = scripted_generate(tokenizer)
    env = ArithmeticEnv(instructions="Use the calculator.")  # with the calculator
    tasks = read_jsonl(DATA_DIR / "small_arithmetic_train.jsonl")[:8]
    seen = []

    def record(prompts, completions, environments, **kwargs):
        seen.append((completions, [dict(e.task) for e in environments], [list(e.calls) for e in environments]))
        return [0.0] * len(completions)

    otc = with_environment_tool_calls(as_trl_reward(otc_reward, "otc", group_size=4))
    # one prompt per step: on CPU TRL scores every position of prompt (≈300 tokens with the tool schema) and
    # completion against the whole vocabulary, so each sample costs seconds
    config = GRPOConfig(steps=2, prompts_per_step=1, group_size=4, lr=1e-3, progress=False,
                        rollout=RolloutConfig(max_turns=3, max_new_tokens=40, progress=False))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = trl_trainer(model, tokenizer, env, tasks, [correctness_reward, otc, record], config, str(tmp_path),
                          reward_weights=[1.0, 1.0, 0.0], use_cpu=True)
    trainer.train()

    assert len(seen) == 2
    for completions, reset_with, calls in seen:
        for row, (completion, task, made) in enumerate(zip(completions, reset_with, calls, strict=True)):
            assert task in tasks  # reset with the dataset row's task fields (TRL's `prompt` removed)
            if row % 2 == 0:  # the scripted call reached this rollout's environment and ran on its task
                assert made == [{"name": "calculator", "arguments": {"expression": task["expression"]},
                                 "observation": task["answer"]}]
                assert [m["role"] for m in completion] == ["assistant", "tool", "assistant"]
                assert completion[-1]["content"] == f"<answer>{task['answer']}</answer>"
            else:
                assert made == [] and [m["role"] for m in completion] == ["assistant"]
    rows = trl_history(trainer.state.log_history)
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:  # half of each group calls the tool once and is right: both rewards read that
        assert r["rewards/correctness_reward/mean"] == 0.5 and r["rewards/otc/mean"] == 0.5
        assert r["tools/call_frequency"] == 0.5 and r["frac_reward_zero_std"] == 0.0
    changed = [n for n, p in model.named_parameters() if not p.detach().equal(before[n])]
    assert changed, "TRL's optimizer step did not change the model"
