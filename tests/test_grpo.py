"""The GRPO trainer: it learns, it resumes to the identical state, and it logs TRL's metric names."""

import pytest
import torch

from agentrl_lite.data import arithmetic_tasks
from agentrl_lite.envs import ArithmeticEnv
from agentrl_lite.grpo import GRPOConfig, GRPOTrainer
from agentrl_lite.models import tiny_policy
from agentrl_lite.rl import group_advantages
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.scoring import token_logprobs

TASKS = arithmetic_tasks(16, seed=7)


def even_token_reward(prompts, completions, episodes, **kwargs):
    """A reward a random tiny model can learn: the share of its sampled token ids that are even."""
    rewards = []
    for ep in episodes:
        sampled = [t for t, m in zip(ep.token_ids, ep.model_mask, strict=True) if m]
        rewards.append(sum(t % 2 == 0 for t in sampled) / len(sampled))
    return rewards


def make_trainer(tmp_path, **overrides):
    model, tokenizer = tiny_policy(seed=0, init_std=1.0)  # peaked: its probability mass can move in a few steps
    settings = dict(steps=4, prompts_per_step=2, group_size=4, lr=1e-3, micro_batch_size=3, seed=0,
                    rollout=RolloutConfig(max_turns=1, max_new_tokens=8, temperature=1.0, progress=False),
                    output_dir=str(tmp_path), progress=False)
    config = GRPOConfig(**{**settings, **overrides})
    return GRPOTrainer(model, tokenizer, ArithmeticEnv(tools=[]), TASKS, [even_token_reward], config)


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_resume_reaches_the_identical_state(tmp_path):
    straight = make_trainer(tmp_path / "a")
    before = params(straight.model)
    straight.train()
    interrupted = make_trainer(tmp_path / "b")
    interrupted.train(steps=2)
    interrupted.save_checkpoint(tmp_path / "ckpt")
    resumed = make_trainer(tmp_path / "c")  # a fresh process would start exactly like this
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert resumed.step_count == 2
    resumed.train()
    final_a, final_c = params(straight.model), params(resumed.model)
    assert any(not torch.equal(before[n], final_a[n]) for n in before), "training changed nothing"
    for n in final_a:
        assert torch.equal(final_a[n], final_c[n]), f"{n} differs after resume"
    assert [r["reward"] for r in straight.history] == [r["reward"] for r in resumed.history]


def test_logs_trl_metric_names(tmp_path):
    trainer = make_trainer(tmp_path, loss_type="grpo", beta=0.04, num_iterations=2)
    row = trainer.step()
    for key in ["reward", "reward_std", "rewards/even_token_reward/mean", "frac_reward_zero_std",
                "completions/mean_length", "completions/clipped_ratio", "entropy", "kl",
                "clip_ratio/region_mean", "tools/call_frequency", "step_time", "grad_norm", "loss"]:
        assert key in row, key
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1
    assert row["kl"] >= 0


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
def test_an_update_favours_better_than_average_episodes(tmp_path, loss_type):
    """A small update moves log π up on episodes with positive advantage and down on negative ones.

    To first order the change of Σ_i A_i log π(episode_i) is positive for any descent step on the
    surrogate (all episodes here have the same length, so every loss type weighs them alike).
    """
    trainer = make_trainer(tmp_path, loss_type=loss_type, lr=1e-5, micro_batch_size=4)
    episodes = trainer.sample_groups(trainer.next_tasks(2))
    rewards, _ = trainer.score(episodes)
    advantages = group_advantages(rewards, trainer.config.group_size)
    assert (advantages != 0).any(), "no reward spread: the test needs some"

    def sequence_logprobs():
        out = []
        with torch.no_grad():
            for ep in episodes:
                ids = torch.tensor([ep.token_ids])
                mask = torch.tensor([ep.model_mask])
                out.append(token_logprobs(trainer.model, ids, torch.ones_like(ids), mask).sum().item())
        return torch.tensor(out)

    before = sequence_logprobs()
    trainer.update(episodes, advantages)
    change = sequence_logprobs() - before
    assert (advantages * change).sum() > 0, (advantages, change)
    assert change[advantages > 0].mean() > change[advantages < 0].mean(), (advantages, change)


def test_a_batch_with_no_trainable_token_is_skipped_not_a_crash(tmp_path):
    # a 5-token budget cuts every episode; masking truncated completions leaves no token in the loss
    short = RolloutConfig(max_turns=1, max_new_tokens=5, temperature=1.0, progress=False)
    trainer = make_trainer(tmp_path, mask_truncated_completions=True, rollout=short)
    before = params(trainer.model)
    row = trainer.step()
    assert row["completions/clipped_ratio"] == 1.0 and row["frac_reward_zero_std"] < 1.0  # there was signal
    assert row["grad_norm"] == 0.0
    assert all(torch.equal(before[n], p) for n, p in trainer.model.named_parameters()), "no token, no update"
    # the same samples without masking: the cut episodes are trained on
    trainer = make_trainer(tmp_path, rollout=short)
    assert trainer.step()["grad_norm"] > 0


def test_report_to_trackio_receives_every_row(tmp_path, monkeypatch):
    import sys
    import types

    logged, inits = [], []
    fake = types.SimpleNamespace(init=lambda **kw: inits.append(kw), log=lambda metrics, step: logged.append((step, metrics)))
    monkeypatch.setitem(sys.modules, "trackio", fake)
    trainer = make_trainer(tmp_path, steps=2, report_to="trackio")
    trainer.train()
    assert len(inits) == 1 and inits[0]["config"]["group_size"] == 4
    assert [s for s, _ in logged] == [1, 2] and logged[1][1]["reward"] == trainer.history[1]["reward"]


def test_report_to_is_checked_and_a_missing_package_is_named(tmp_path, monkeypatch):
    import sys

    with pytest.raises(ValueError, match="report_to"):
        make_trainer(tmp_path, report_to="wandb")
    monkeypatch.setitem(sys.modules, "trackio", None)  # importing it raises ImportError
    trainer = make_trainer(tmp_path, steps=1, report_to="trackio")
    with pytest.raises(ImportError, match="pip install trackio"):
        trainer.train()
