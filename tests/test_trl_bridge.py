"""The TRL bridge: our config translated knob for knob, our tasks as TRL's dataset, TRL's logs as our rows,
and a real TRL GRPOTrainer run on a tiny model through the bridge."""

from __future__ import annotations

import pytest

from agentrl_lite.data import DATA_DIR, read_jsonl
from agentrl_lite.envs import ArithmeticEnv
from agentrl_lite.grpo import GRPOConfig
from agentrl_lite.models import tiny_policy
from agentrl_lite.rewards import final_number_reward
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.trl_bridge import trl_config, trl_dataset, trl_history, trl_trainer

CONFIG = GRPOConfig(steps=2, prompts_per_step=2, group_size=4, loss_type="dr_grpo", epsilon=0.1, epsilon_high=0.28,
                    beta=0.0, num_iterations=2, scale_rewards="none", mask_truncated_completions=True, lr=3e-5,
                    seed=7, progress=False,
                    rollout=RolloutConfig(max_turns=1, max_new_tokens=12, temperature=0.9, progress=False))


def test_config_is_translated_knob_for_knob(tmp_path):
    args = trl_config(CONFIG, str(tmp_path), use_cpu=True)
    assert args.per_device_train_batch_size == 8 and args.num_generations == 4
    assert args.gradient_accumulation_steps == 1 and args.max_steps == 2
    assert args.max_completion_length == 12 and args.temperature == 0.9 and args.top_k == 0
    assert (args.loss_type, args.epsilon, args.epsilon_high, args.beta) == ("dr_grpo", 0.1, 0.28, 0.0)
    assert args.num_iterations == 2 and args.scale_rewards == "none" and args.mask_truncated_completions
    assert args.learning_rate == 3e-5 and args.lr_scheduler_type == "constant" and args.warmup_steps == 0
    assert args.seed == 7


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


@pytest.mark.filterwarnings("ignore")
def test_trl_runs_our_env_and_reward_with_a_tiny_model(tmp_path):
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
                        rollout=RolloutConfig(max_turns=1, max_new_tokens=8, progress=False))
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = trl_trainer(model, tokenizer, env, tasks, [reward], config, str(tmp_path), use_cpu=True)
    trainer.train()
    rows = trl_history(trainer.state.log_history)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(0.0 <= r["reward"] <= 1.0 and "frac_reward_zero_std" in r for r in rows)
    assert [n for n, _ in calls] == [8, 8]  # prompts × group per step, and the task column reached the reward
    assert all(set(a) <= {t["answer"] for t in tasks} for _, a in calls)
    changed = [n for n, p in model.named_parameters() if not p.detach().equal(before[n])]
    assert changed, "TRL's optimizer step did not change the model"
