"""Every environment family of the course through TRL's GRPOTrainer (one step each on a tiny random model), and the
pieces that make that possible: nested task fields kept intact, per-task tools, the global batch on N processes."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace

import pytest
import torch

from agentrl_lite.grpo import GRPOConfig
from agentrl_lite.loss import LossConfig
from agentrl_lite.models import tiny_policy
from agentrl_lite.rewards import completion_text, correctness_reward, tool_call_reward
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.arithmetic import ArithmeticEnv
from agentrl_lite.tasks.function_calls import FunctionCallEnv
from agentrl_lite.tools import Toolbox, calculator
from agentrl_lite.trl_bridge import (
    _rows_per_pass,
    nested_fields,
    trl_config,
    trl_dataset,
    trl_environment_factories,
    trl_trainer,
    with_decoded_fields,
)

FUNCTION_TASKS = [t for t in read_jsonl(DATA_DIR / "toolcall_train.jsonl")[:40] if len(t["gold_calls"]) == 1][:2]


def spread(prompts, completions, **kwargs):
    """A reward the random model's samples differ in (their length), so the step has advantages."""
    return [len(completion_text(c)) / 100 for c in completions]


def recording(reward, seen):
    """`reward`, recording the keyword columns it was called with."""
    def wrapped(prompts, completions, **kwargs):
        seen.append(kwargs)
        return reward(prompts, completions, **kwargs)
    wrapped.__name__ = reward.__name__
    return wrapped


def one_trl_step(tmp_path, env, tasks, rewards, max_turns, tokens=8):
    model, tokenizer = tiny_policy(seed=0, init_std=0.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    config = GRPOConfig(steps=1, prompts_per_step=len(tasks), group_size=2, lr=1e-3, progress=False,
                        rollout=RolloutConfig(max_turns=max_turns, max_new_tokens=tokens, progress=False))
    trainer = trl_trainer(model, tokenizer, env, tasks, [*rewards, spread], config, str(tmp_path), use_cpu=True)
    trainer.train()
    assert any(not p.detach().equal(before[n]) for n, p in model.named_parameters()), "TRL's step changed nothing"
    return trainer


# ------------------------------------------------------------------------------------------ fast: the pieces
def test_nested_fields_are_stored_as_json_and_reach_rewards_as_the_tasks_hold_them():
    tasks = FUNCTION_TASKS
    assert tasks[0]["functions"][0]["name"] != tasks[1]["functions"][0]["name"], "two tasks with other tools"
    assert {"functions", "gold_calls", "messages"} <= set(nested_fields(tasks))
    _, tokenizer = tiny_policy(seed=0)
    ds = trl_dataset(FunctionCallEnv(), tasks, tokenizer)
    for row, task in zip(ds, tasks, strict=True):
        assert json.loads(row["gold_calls"]) == task["gold_calls"]  # not merged into a struct padded with None
        assert isinstance(row["prompt"], str) and task["functions"][0]["name"] in row["prompt"]  # its own schema
        other = tasks[1 - tasks.index(task)]["functions"][0]["name"]
        assert other not in row["prompt"]
    seen = []
    reward = with_decoded_fields(recording(tool_call_reward, seen), nested_fields(tasks))
    gold_text = [f'<tool_call>{json.dumps(t["gold_calls"][0])}</tool_call>' for t in tasks]
    assert reward([None, None], gold_text, gold_calls=list(ds["gold_calls"])) == [3.0, 3.0]
    assert seen[0]["gold_calls"] == [t["gold_calls"] for t in tasks]
    with pytest.raises(ValueError, match="tokenizer"):
        trl_dataset(FunctionCallEnv(), tasks)


def test_tasks_with_different_tool_sets_get_one_factory_each():
    def lookup(key: str) -> str:
        """Look a key up.

        Args:
            key: the key
        """
        return key.upper()

    class TwoSets:  # even tasks get the calculator, odd ones the lookup
        def prompt(self, task):
            return [{"role": "user", "content": task["question"]}]

        def toolbox_for(self, task):
            return Toolbox([calculator] if task["i"] % 2 == 0 else [lookup])

    tasks = [{"i": i, "question": f"q{i}", "extra": [i]} for i in range(4)]
    factories, names = trl_environment_factories(TwoSets(), tasks)
    assert set(factories) == {"calculator", "lookup"} and names == ["calculator", "lookup"] * 2
    rollout = factories["lookup"]()
    rollout.reset(**trl_dataset(TwoSets(), tasks, environments=names)[1])
    assert rollout.task == {"i": 1, "question": "q1", "extra": [1]}  # decoded, routing column dropped
    assert rollout.lookup(key="ab") == "AB" and not hasattr(rollout, "calculator")


def test_the_global_batch_is_ours_on_any_number_of_processes(tmp_path):
    config = GRPOConfig(prompts_per_step=4, group_size=8, micro_batch_size=8, progress=False)
    for n in (1, 2, 4, 8):  # per-device rows × accumulation × processes: our 32 completions per optimizer step
        rows, accumulation = _rows_per_pass(config, n)
        assert rows * accumulation * n == 32 and rows <= 8
    # TRL's own config checks its batches against the processes it runs on (one here): two fit that check
    args = trl_config(config, str(tmp_path), world_size=2, use_cpu=True)
    assert (args.per_device_train_batch_size, args.gradient_accumulation_steps) == (8, 2)
    with pytest.raises(ValueError, match="3 processes"):
        trl_config(config, str(tmp_path), world_size=3, use_cpu=True)
    bnpo = replace(config, loss=LossConfig(loss_type="bnpo"))
    assert _rows_per_pass(bnpo, 2) == (16, 1)  # bnpo normalises per pass: one pass per process


def test_report_to_and_mixed_precision_go_through(tmp_path):
    config = GRPOConfig(report_to="tensorboard", bf16_loss=True, progress=False)
    args = trl_config(config, str(tmp_path), use_cpu=True)
    assert args.report_to == ["tensorboard"] and args.bf16
    plain = trl_config(GRPOConfig(progress=False), str(tmp_path), use_cpu=True)
    assert plain.report_to == [] and not plain.bf16
    with pytest.raises(ValueError, match="loss_on_tool_tokens"):
        trl_config(GRPOConfig(loss_on_tool_tokens=True), str(tmp_path), use_cpu=True)


# ------------------------------------------------------------------------ slow: one TRL step per family
@pytest.mark.slow
def test_word_problems_with_the_calculator_through_trl(tmp_path):
    tasks = read_jsonl(DATA_DIR / "word_problems_train.jsonl")[:2]  # `steps` is a list: stored as JSON
    seen = []
    one_trl_step(tmp_path, ArithmeticEnv(tools=[calculator]), tasks, [recording(correctness_reward, seen)], 3)
    assert seen[0]["steps"] == [t["steps"] for t in tasks for _ in range(2)]


@pytest.mark.slow
def test_function_calls_with_per_task_schemas_through_trl(tmp_path):
    seen = []
    one_trl_step(tmp_path, FunctionCallEnv(), FUNCTION_TASKS, [recording(tool_call_reward, seen)], 1, tokens=12)
    assert seen[0]["gold_calls"] == [t["gold_calls"] for t in FUNCTION_TASKS for _ in range(2)]


@pytest.mark.slow
def test_search_with_its_search_tool_through_trl(tmp_path):
    from agentrl_lite.tasks.search import SearchEnv
    from agentrl_lite.tools import SearchIndex

    tasks = read_jsonl(DATA_DIR / "search_train.jsonl")[:2]
    seen = []
    trainer = one_trl_step(tmp_path, SearchEnv(SearchIndex(read_jsonl(DATA_DIR / "search_corpus.jsonl"))), tasks,
                           [recording(correctness_reward, seen)], 2)
    assert seen[0]["support"] == [t["support"] for t in tasks for _ in range(2)]
    assert "search" in {tool.__name__ for tool in trainer.tools}


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("gcc") is None, reason="the cpu_c backend needs gcc")
def test_kernels_with_the_verifier_as_reward_through_trl(tmp_path):
    from agentrl_lite.tasks.kernels.env import KernelEnv, kernel_tasks

    env = KernelEnv(shape="smoke")
    seen = []
    one_trl_step(tmp_path, env, kernel_tasks("train")[:2], [recording(env.reward, seen)], 1)
    assert len(seen[0]["name"]) == 4


@pytest.mark.slow
def test_the_memory_manager_with_its_bank_through_trl(tmp_path):
    from agentrl_lite.tasks.memory import MemoryManagerEnv, decision_reward, manager_tasks

    tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_train.jsonl")[:1])[3:5]  # `bank` is a dict, `ideal` too
    seen = []
    trainer = one_trl_step(tmp_path, MemoryManagerEnv(), tasks, [recording(decision_reward, seen)], 2)
    assert seen[0]["ideal"] == [t["ideal"] for t in tasks for _ in range(2)]
    assert all(e.toolbox is not None and e.task["bank"] in [t["bank"] for t in tasks] for e in trainer.environments)
    assert torch.is_tensor(next(trainer.model.parameters()))


@pytest.mark.slow
def test_sql_questions_with_the_read_only_sql_tool_through_trl(tmp_path):
    from agentrl_lite.tasks.sql import SqlEnv
    from agentrl_lite.tasks.sql.env import execution_match_reward

    tasks = read_jsonl(DATA_DIR / "sql_train.jsonl")[:2]
    seen = []
    trainer = one_trl_step(tmp_path, SqlEnv(), tasks, [recording(execution_match_reward, seen)], 2)
    assert seen[0]["answer"] == [t["answer"] for t in tasks for _ in range(2)]
    assert "sql" in {tool.__name__ for tool in trainer.tools}
    rollout = trainer.environments[0]  # the tool TRL calls answers from the read-only database, errors as text
    assert rollout.sql(query=tasks[0]["gold_sql"]).strip() and rollout.sql(query="DROP TABLE customers").startswith(
        "Error:")
