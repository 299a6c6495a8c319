"""agentrl_lite.advantages and agentrl_lite.loss compute what TRL 1.16's GRPOTrainer computes — checked by running TRL's own code.

For each configuration we build a real `trl.GRPOTrainer` (tiny random policy, in-memory dataset, CPU,
one process) from a `GRPOConfig`, feed its `_compute_loss` a batch we constructed, and replace only the
model forward (`_get_per_token_logps_and_entropies`) with fixed log-probabilities. TRL's own ratio,
clipping, KL and aggregation code then runs on the same tensors as `policy_loss`; we compare the loss,
its gradient with respect to the log-probabilities, and the metrics TRL logs. Advantages are compared
by running TRL's generation-and-scoring step with a reward function that returns fixed rewards.

Tolerance 1e-6: both sides do the same float32 arithmetic on O(1) numbers (the differences seen are 0
or a few ulps).
"""

from __future__ import annotations

import math

import pytest
import torch
from datasets import Dataset
from transformers import AutoModelForCausalLM
from trl import GRPOConfig, GRPOTrainer
from trl.trainer.utils import entropy_from_logits as trl_entropy_from_logits

from agentrl_lite.advantages import frac_reward_zero_std, group_advantages
from agentrl_lite.logprobs import entropy_from_logits, token_logprobs
from agentrl_lite.loss import LossConfig, policy_loss
from agentrl_lite.models import tiny_policy

TOL = 1e-6
BATCH, SEQ, PROMPT = 4, 7, 3
MAX_COMPLETION_LENGTH = 10  # the budget; batches are padded only to their longest completion (SEQ)
METRICS = ["clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "clip_ratio/low_min", "clip_ratio/high_max"]


@pytest.fixture(scope="module")
def policy(tmp_path_factory):
    """A tiny policy saved to disk, so that TRL can load its reference model (beta > 0) from the same path."""
    model, tokenizer = tiny_policy(seed=0)
    path = tmp_path_factory.mktemp("tiny_policy")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return AutoModelForCausalLM.from_pretrained(path), tokenizer


def make_trainer(policy, tmp_path, rewards=None, **config):
    """A real GRPOTrainer in training mode, as the Trainer loop would call `_compute_loss`."""
    model, tokenizer = policy
    rewards = rewards or [0.0] * BATCH
    per_device = config.pop("per_device_train_batch_size", BATCH)
    max_completion_length = config.pop("max_completion_length", MAX_COMPLETION_LENGTH)

    def fixed_reward(prompts, completions, **kwargs):
        return list(rewards)

    args = GRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=per_device,
        num_generations=2,
        max_completion_length=max_completion_length,
        report_to="none",
        use_cpu=True,
        bf16=False,
        save_strategy="no",
        **config,
    )
    dataset = Dataset.from_dict({"prompt": ["2+2=", "3*3="]})
    trainer = GRPOTrainer(
        model=model, reward_funcs=fixed_reward, args=args, train_dataset=dataset, processing_class=tokenizer
    )
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = args.gradient_accumulation_steps  # set by the training loop
    return trainer


# log(π_θ / π_old) on the policy tokens, chosen to hit every clipping case: 0.22 (ratio 1.25: clipped by
# ε_high = 0.2, not by 0.28), 0.35 (1.42: clipped by both), -0.3 and -0.4 (0.74, 0.67: below 1 - 0.2).
# Row 0 (A > 0) has two tool tokens (positions 2, 3); row 1 and 2 have A < 0; row 3 has no tokens at all.
LOG_RATIO = torch.tensor([
    [0.22, 0.35, 0.9, -0.5, -0.3, 0.05, 0.1],
    [-0.3, 0.35, -0.05, 0.22, 0.0, 0.0, 0.0],
    [-0.4, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
    [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0],
])


def random_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Completions of uneven lengths (7, 4, 1, 0 tokens), one with two tool-output tokens inside it."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([7, 4, 1, 0])
    completion_mask = (torch.arange(SEQ) < lengths[:, None]).long()
    tool_mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    tool_mask[0, 2:4] = 0  # tokens the environment wrote: in the completion, not in the loss
    logprobs = -3 * torch.rand(BATCH, SEQ, generator=gen)
    padding_junk = torch.randn(BATCH, SEQ, generator=gen) * (1 - completion_mask)  # masked: must not matter
    return {
        "logprobs": logprobs,
        "old_logprobs": logprobs - LOG_RATIO + padding_junk,
        "ref_logprobs": logprobs + 0.3 * torch.randn(BATCH, SEQ, generator=gen),
        "advantages": torch.tensor([1.3, -0.7, -1.1, 0.4]),
        "completion_mask": completion_mask,
        "tool_mask": tool_mask,
        "entropies": 2 * torch.rand(BATCH, SEQ, generator=gen),
    }


def trl_loss(trainer, batch, num_items_in_batch):
    """TRL's `_compute_loss` on our batch: (loss, d loss / d logprobs, metrics logged by this call)."""
    logprobs = batch["logprobs"].clone().requires_grad_()
    trainer._get_per_token_logps_and_entropies = lambda *args, **kwargs: (logprobs, batch["entropies"], None)
    inputs = {
        "prompt_ids": torch.ones(BATCH, PROMPT, dtype=torch.long),
        "prompt_mask": torch.ones(BATCH, PROMPT, dtype=torch.long),
        "completion_ids": torch.ones(BATCH, SEQ, dtype=torch.long),
        "completion_mask": batch["completion_mask"],
        "tool_mask": batch["tool_mask"],
        "advantages": batch["advantages"],
        "old_per_token_logps": batch["old_logprobs"],
        "ref_per_token_logps": batch["ref_logprobs"],
        "num_items_in_batch": torch.tensor(num_items_in_batch),
    }
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    metrics = {name: values[-1] for name, values in trainer._metrics["train"].items()}
    return loss.item(), logprobs.grad, metrics


def our_loss(batch, config, num_items_in_batch):
    logprobs = batch["logprobs"].clone().requires_grad_()
    mask = batch["completion_mask"] * batch["tool_mask"]  # TRL's loss mask
    loss, metrics = policy_loss(
        logprobs, batch["old_logprobs"], batch["advantages"], mask, config,
        ref_logprobs=batch["ref_logprobs"], num_items_in_batch=num_items_in_batch,
    )
    loss.backward()
    return loss.item(), logprobs.grad, metrics


def assert_same(ours, theirs, names, scale=1.0):
    loss, grad, metrics = ours
    trl_value, trl_grad, trl_metrics = theirs
    assert abs(loss / scale - trl_value) < TOL, (loss / scale, trl_value)
    assert (grad / scale - trl_grad).abs().max().item() < TOL
    for name in names:
        assert math.isclose(metrics[name], trl_metrics[name], abs_tol=TOL), (name, metrics[name], trl_metrics[name])


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo", "bnpo"])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("epsilon_high", [None, 0.28])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_policy_loss_equals_trl(policy, tmp_path, loss_type, beta, epsilon_high, level):
    config = LossConfig(
        loss_type=loss_type, epsilon=0.2, epsilon_high=epsilon_high, beta=beta,
        importance_sampling_level=level, max_completion_length=MAX_COMPLETION_LENGTH,
    )
    trainer = make_trainer(
        policy, tmp_path, loss_type=loss_type, beta=beta, epsilon=0.2, epsilon_high=epsilon_high,
        importance_sampling_level=level,
    )
    batch = random_batch()
    num_items = int((batch["completion_mask"] * batch["tool_mask"]).sum())  # 10 policy tokens
    theirs = trl_loss(trainer, batch, num_items)
    ours = our_loss(batch, config, num_items)
    assert_same(ours, theirs, METRICS + (["kl"] if beta else []))
    if level == "token":  # the batch exercises both clips (10 policy tokens), so the comparison can fail
        assert ours[2]["clip_ratio/low_mean"] == pytest.approx(2 / 10)  # -0.3 (row 1), -0.4 (row 2)
        assert ours[2]["clip_ratio/high_mean"] == pytest.approx((1 if epsilon_high else 2) / 10)  # 0.35 [, 0.22]


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "bnpo", "dapo"])
def test_gradient_accumulation_convention(policy, tmp_path, loss_type):
    """Two micro-batches per optimizer step: TRL divides grpo/bnpo/dr_grpo by 2; dapo divides by the tokens
    of the whole step instead (num_items_in_batch counts both micro-batches: 10 here + 13 in the other)."""
    trainer = make_trainer(policy, tmp_path, loss_type=loss_type, gradient_accumulation_steps=2)
    batch = random_batch(seed=1)
    config = LossConfig(loss_type=loss_type, max_completion_length=MAX_COMPLETION_LENGTH)
    theirs = trl_loss(trainer, batch, num_items_in_batch=23)
    ours = our_loss(batch, config, num_items_in_batch=23)
    assert_same(ours, theirs, METRICS, scale=1.0 if loss_type == "dapo" else 2.0)


@pytest.mark.parametrize("scale_rewards", ["group", "batch", "none"])
def test_group_advantages_equal_trl(policy, tmp_path, scale_rewards):
    """TRL generates 6 completions (3 prompts × 2), scores them with fixed rewards and computes advantages."""
    rewards = [1.0, 0.0, 2.0, 2.0, None, 3.0]  # a spread group, a zero-spread group, an unscorable completion
    trainer = make_trainer(
        policy, tmp_path, rewards=rewards, scale_rewards=scale_rewards, per_device_train_batch_size=6,
        max_completion_length=2,  # the completions themselves do not matter here
    )
    rows = [{"prompt": p} for p in ("2+2=", "2+2=", "3*3=", "3*3=", "5-1=", "5-1=")]
    out = trainer._generate_and_score_completions(rows)
    ours = group_advantages(torch.tensor([math.nan if r is None else r for r in rewards]), 2, scale_rewards)
    assert (ours - out["advantages"]).abs().max().item() < TOL
    if scale_rewards != "batch":  # under "batch" TRL's metric asks whether the whole batch has zero spread
        ours_frac = frac_reward_zero_std(torch.tensor([math.nan if r is None else r for r in rewards]), 2)
        assert ours_frac == trainer._metrics["train"]["frac_reward_zero_std"][-1] == pytest.approx(1 / 3)


def test_entropy_equals_trl():
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0))
    expected = trl_entropy_from_logits(logits)
    assert (entropy_from_logits(logits) - expected).abs().max().item() < TOL


def test_end_to_end_gradient_equals_trl(policy, tmp_path):
    """No patching: TRL samples, scores and differentiates its loss; we score the same tokens with
    agentrl_lite.scoring and differentiate policy_loss. Same parameter gradient (tolerance 1e-5 relative
    to the largest entry: the two scoring paths compute the logits differently, float32 rounding)."""
    trainer = make_trainer(
        policy, tmp_path, rewards=[1.0, 0.0, 0.5, 2.0], loss_type="dapo", beta=0.04, max_completion_length=4
    )
    model = trainer.model
    out = trainer._generate_and_score_completions([{"prompt": p} for p in ("2+2=", "2+2=", "3*3=", "3*3=")])

    model.zero_grad()
    trainer._compute_loss(model, out).backward()
    trl_grads = [p.grad.clone() for p in model.parameters()]

    model.zero_grad()
    input_ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
    attention_mask = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
    prompt_len = out["prompt_ids"].shape[1]
    score_mask = torch.cat([torch.zeros_like(out["prompt_mask"]), out["completion_mask"]], dim=1)
    logprobs = token_logprobs(model, input_ids, attention_mask, score_mask)[:, prompt_len:]
    config = LossConfig(loss_type="dapo", beta=0.04)
    loss, _ = policy_loss(
        logprobs, logprobs.detach(), out["advantages"], out["completion_mask"], config,
        ref_logprobs=out["ref_per_token_logps"], num_items_in_batch=out["num_items_in_batch"],
    )
    loss.backward()
    scale = max(g.abs().max().item() for g in trl_grads)
    assert scale > 0
    for ours, theirs in zip((p.grad for p in model.parameters()), trl_grads, strict=True):
        assert (ours - theirs).abs().max().item() < 1e-5 * scale
