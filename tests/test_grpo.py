"""The GRPO trainer: it learns, it resumes to the identical state, and it logs TRL's metric names."""

import math

import pytest
import torch

from agentrl_lite import grpo
from agentrl_lite.advantages import group_advantages, step_group_ids, turn_reward_table
from agentrl_lite.episode import Episode, Turn
from agentrl_lite.grpo import GRPOConfig, GRPOTrainer, micro_batches
from agentrl_lite.logprobs import pass_tokens, shared_with_previous, token_logprobs
from agentrl_lite.loss import LossConfig
from agentrl_lite.models import tiny_policy
from agentrl_lite.rewards import completion_text, final_number_reward, reward_kwargs
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.tasks.arithmetic import ArithmeticEnv, arithmetic_tasks

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
    loss_fields = {k: overrides.pop(k) for k in ("loss_type", "epsilon", "epsilon_high", "beta",
                                                 "importance_sampling_level") if k in overrides}
    config = GRPOConfig(**{**settings, **overrides}, loss=LossConfig(**loss_fields))
    return GRPOTrainer(model, tokenizer, ArithmeticEnv(tools=[]), TASKS, [even_token_reward], config)


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# ------------------------------------------------------------------------------------------ void turns
def answer_half(episodes):
    """Give every other episode a final answer (its text only: the tokens stay what was sampled)."""
    for ep in episodes[::2]:
        ep.turns[1].content = "<answer>4</answer>"
    return episodes


@pytest.mark.slow
def test_void_turn_episodes_get_no_gradient_when_filtered(tmp_path):
    sampler = make_trainer(tmp_path)
    episodes = answer_half(sampler.sample_groups(sampler.next_tasks(2)))
    void = torch.tensor([ep.has_void_turn for ep in episodes])
    assert void.tolist() == [False, True] * 4  # the random model's replies hold neither a call nor an answer
    rewards, _ = sampler.score(episodes)
    advantages = group_advantages(rewards, 4)
    other = torch.where(void, -5 * advantages + 3, advantages)  # change only the void episodes' advantages

    def updated(adv, filter_void_turns):
        trainer = make_trainer(tmp_path, filter_void_turns=filter_void_turns, micro_batch_size=4)
        trainer.update(episodes, adv)
        return params(trainer.model)

    filtered = make_trainer(tmp_path, filter_void_turns=True)
    assert [any(m) for m in filtered.loss_mask(episodes)] == (~void).tolist()
    a, b = updated(advantages, True), updated(other, True)
    assert all(torch.equal(a[n], b[n]) for n in a), "a filtered episode moved the weights"
    a, b = updated(advantages, False), updated(other, False)
    assert any(not torch.equal(a[n], b[n]) for n in a), "without the filter the void episodes must count"


@pytest.mark.parametrize("filter_void_turns, filtered", [(True, 4.0), (False, 0.0)])
def test_void_turn_ratio_is_logged(tmp_path, filter_void_turns, filtered):
    trainer = make_trainer(tmp_path, filter_void_turns=filter_void_turns)
    sample = trainer.sample_groups
    trainer.sample_groups = lambda tasks: answer_half(sample(tasks))
    row = trainer.step()
    assert row["void_turn_ratio"] == 0.5 and row["void_turn_filtered"] == filtered
    assert row["grad_norm"] > 0  # the answered half still trains


# -------------------------------------------------------------------------------------- credit modes
@pytest.mark.slow
def test_broadcast_credit_is_the_episode_advantage_and_discounted_with_gamma_one_trains_identically(tmp_path):
    trainer = make_trainer(tmp_path / "a")
    episodes = trainer.sample_groups(trainer.next_tasks(2))
    rewards, _ = trainer.score(episodes)
    advantages, metrics = trainer.advantages(episodes, rewards)
    assert torch.equal(advantages, group_advantages(rewards, 4)) and metrics == {}
    # the per-turn path (each token gets its turn's advantage) gives the same steps when every turn is equal
    broadcast = make_trainer(tmp_path / "b")
    broadcast.train(steps=2)
    discounted = make_trainer(tmp_path / "c", credit="discounted", gamma=1.0)
    discounted.train(steps=2)
    assert broadcast.history[-1]["loss"] == discounted.history[-1]["loss"]
    final_b, final_d = params(broadcast.model), params(discounted.model)
    assert all(torch.equal(final_b[n], final_d[n]) for n in final_b)


def hand_episode(*segments):
    """An episode from token ids: the prompt, then model and tool turns alternating."""
    ids, mask, turns = [], [], []
    for k, segment in enumerate(segments):
        role = "prompt" if k == 0 else "model" if k % 2 else "tool"
        turns.append(Turn(role, len(ids), len(ids) + len(segment), "", content="<answer>1</answer>"))
        ids += segment
        mask += [int(role == "model")] * len(segment)
    return Episode(prompt=[], token_ids=ids, logprobs=[0.0] * len(ids), model_mask=mask, turns=turns)


PROMPT = [101, 102, 103]
SIBLINGS = [
    hand_episode(PROMPT, [110, 111], [120], [112]),  # call, result, answer
    hand_episode(PROMPT, [110, 111], [120], [113]),  # same call, same result, another answer
    hand_episode(PROMPT, [114], [121], [115]),  # another call
    hand_episode(PROMPT, [116]),  # answers at once
]


def test_step_group_credit_by_hand(tmp_path, monkeypatch):
    trainer = make_trainer(tmp_path, credit="step_group", gamma=0.5, micro_batch_size=4)
    assert step_group_ids(SIBLINGS, 4, 2).tolist() == [[0, 1], [0, 1], [0, 2], [0, -1]]
    advantages, metrics = trainer.advantages(SIBLINGS, torch.tensor([1.0, 0.0, 1.0, 1.0]))
    # episode advantages: rewards [1, 0, 1, 1], mean 0.75, std sqrt(0.75 / 3) = 0.5 -> [1, -3, 1, 1] · 0.25 / 0.5001
    episode = torch.tensor([0.25, -0.75, 0.25, 0.25]) / (0.5 + 1e-4)
    # returns (γ = 0.5): [[0.5, 1], [0, 0], [0.5, 1], [1, -]]. Step group 0 (all first turns): mean 0.5,
    # centred [0, -0.5, 0, 0.5], std sqrt(0.5 / 3); step group 1 (second turns of 0 and 1, same state):
    # centred [0.5, -0.5], std sqrt(0.5); step group 2 (episode 2's second turn) is alone: 0
    s0, s1 = math.sqrt(0.5 / 3) + 1e-4, math.sqrt(0.5) + 1e-4
    step = torch.tensor([[0.0, 0.5 / s1], [-0.5 / s0, -0.5 / s1], [0.0, 0.0], [0.5 / s0, 0.0]])
    expected = (episode.unsqueeze(1) + step) * torch.tensor([[1.0, 1], [1, 1], [1, 1], [1, 0]])  # ω = 1
    torch.testing.assert_close(advantages, expected, atol=1e-6, rtol=0)
    assert metrics["step_groups/shared_turn_ratio"] == pytest.approx(6 / 7)  # all but episode 2's second turn

    seen = []
    real_loss = grpo.policy_loss

    def recording_loss(logprobs, old_logprobs, advantages, *args, **kwargs):
        seen.append(advantages)  # what the loss receives: one advantage per token
        return real_loss(logprobs, old_logprobs, advantages, *args, **kwargs)

    monkeypatch.setattr(grpo, "policy_loss", recording_loss)
    trainer.update(SIBLINGS, advantages)
    (per_token,) = seen
    a = advantages.tolist()
    rows = [  # prompt | turn 0 | tool | turn 1, right-padded; each token its turn's value
        [0, 0, 0, a[0][0], a[0][0], 0, a[0][1]],
        [0, 0, 0, a[1][0], a[1][0], 0, a[1][1]],
        [0, 0, 0, a[2][0], 0, a[2][1], 0],
        [0, 0, 0, a[3][0], 0, 0, 0],
    ]
    order, _ = trainer.micro_batch_plan(SIBLINGS, advantages)  # the loss pass runs the episodes shortest first
    assert per_token.tolist() == [rows[i] for i in order]


def test_turn_rewards_add_to_the_episode_reward_at_the_last_turn(tmp_path):
    turn_rewards, turn_mask, extra = turn_reward_table(SIBLINGS, torch.tensor([1.0, 0.0, 1.0, 1.0]),
                                                       lambda ep: [0.1] * len(ep.model_turns))
    torch.testing.assert_close(turn_rewards, torch.tensor([[0.1, 1.1], [0.1, 0.1], [0.1, 1.1], [1.1, 0.0]]))
    assert turn_mask.tolist() == [[1, 1], [1, 1], [1, 1], [1, 0]]
    torch.testing.assert_close(extra, torch.tensor([0.2, 0.2, 0.2, 0.1]))
    with pytest.raises(ValueError, match="one reward per model turn"):
        turn_reward_table(SIBLINGS, torch.zeros(4), lambda ep: [0.1])
    with pytest.raises(ValueError, match="credit="):
        make_trainer(tmp_path, credit="per_token")


@pytest.mark.parametrize("skip", [True, False])
def test_a_batch_without_signal_moves_adam_only_when_not_skipped(tmp_path, skip):
    trainer = make_trainer(tmp_path, skip_empty_updates=skip)
    episodes = trainer.sample_groups(trainer.next_tasks(2))
    signal = torch.tensor([1.0, -1.0, 0.5, -0.5] * 2)
    assert trainer.update(episodes, signal)["update_skipped"] == 0.0
    before = params(trainer.model)
    metrics = trainer.update(episodes, torch.zeros(8))  # e.g. every group without reward spread
    after = params(trainer.model)
    moved = any(not torch.equal(before[n], after[n]) for n in before)
    if skip:
        assert metrics == {"update_skipped": 1.0} and not moved
    else:  # the zero gradient still lets AdamW's momentum replay the previous update
        assert metrics["update_skipped"] == 0.0 and metrics["grad_norm"] == 0.0 and moved


# ------------------------------------------------------------------------------------- reward inputs
def calculator_episode(final_reply: str) -> Episode:
    """A two-turn episode as the rollout engine records it: a calculator call, the tool's reply "391" (inserted
    by the environment), then `final_reply` from the policy."""
    call = '<tool_call>\n{"name": "calculator", "arguments": {"expression": "17 * 23"}}\n</tool_call>'
    texts = ["<|im_start|>user\nWhat is 17 * 23?<|im_end|>\n<|im_start|>assistant\n", call + "<|im_end|>",
             "\n<|im_start|>user\n<tool_response>\n391\n</tool_response><|im_end|>\n<|im_start|>assistant\n",
             final_reply + "<|im_end|>"]
    turns, start = [], 0
    for k, text in enumerate(texts):
        role = ("prompt", "model", "tool", "model")[k]
        turns.append(Turn(role, start, start + 5, text, content=text.removesuffix("<|im_end|>") if role == "model" else "",
                          tool_calls=[{"name": "calculator", "arguments": {"expression": "17 * 23"}}] if k == 1 else [],
                          tool_results=["391"] if k == 2 else []))
        start += 5
    mask = [0] * 5 + [1] * 5 + [0] * 5 + [1] * 5
    return Episode(prompt=[{"role": "user", "content": "What is 17 * 23?"}], token_ids=list(range(20)),
                   logprobs=[0.0] * 20, model_mask=mask, turns=turns, stop_reason="no_answer",
                   metadata={"question": "What is 17 * 23?", "answer": "391"})


def test_text_rewards_see_only_the_policys_text_in_a_multi_turn_episode(tmp_path):
    """The calculator's "391" sits between the policy's turns; a final turn without a number earns nothing.

    Before the trainer built its reward arguments with `reward_kwargs`, it passed the episode's whole text
    after the prompt, tool reply included, and `final_number_reward` paid this episode 1.0."""
    silent, stated = calculator_episode("I have computed it."), calculator_episode("It is 391.")
    trainer = make_trainer(tmp_path)
    trainer.reward_funcs, trainer.reward_weights = [final_number_reward], [1.0]
    rewards, _ = trainer.score([silent, stated])
    assert rewards.tolist() == [0.0, 1.0]


def test_the_trainer_calls_rewards_with_reward_kwargs(tmp_path):
    seen = []

    def recording_reward(prompts, completions, **kwargs):
        seen.append({"prompts": prompts, "completions": completions, **kwargs})
        return [0.0] * len(completions)

    episodes = [calculator_episode("I have computed it."), calculator_episode("It is 391.")]
    trainer = make_trainer(tmp_path)
    trainer.reward_funcs, trainer.reward_weights = [recording_reward], [1.0]
    trainer.score(episodes)
    (received,) = seen
    expected = reward_kwargs(episodes)
    assert received.keys() == expected.keys()
    assert received["completions"] == expected["completions"] and received["answer"] == ["391", "391"]
    assert received["tool_calls"] == [1, 1] and received["completion_lengths"] == [15, 15]
    assert [completion_text(c) for c in received["completions"]] == [
        episodes[0].turns[1].content + "\nI have computed it.", episodes[1].turns[1].content + "\nIt is 391."]


def test_the_trainers_loss_is_the_configs_loss_gspo_included(tmp_path, monkeypatch):
    """GRPOConfig holds a LossConfig: GSPO's sequence-level ratio reaches the loss, and dr_grpo's normaliser
    defaults to the rollout's token budget."""
    seen = []
    real_loss = grpo.policy_loss

    def recording_loss(logprobs, old_logprobs, advantages, mask, config, **kwargs):
        seen.append(config)
        return real_loss(logprobs, old_logprobs, advantages, mask, config, **kwargs)

    monkeypatch.setattr(grpo, "policy_loss", recording_loss)
    trainer = make_trainer(tmp_path, loss_type="dr_grpo", importance_sampling_level="sequence", micro_batch_size=8)
    trainer.step()
    assert seen and all(c.importance_sampling_level == "sequence" and c.loss_type == "dr_grpo" for c in seen)
    assert seen[0].max_completion_length == 8  # max_new_tokens × max_turns of the test rollout
    with pytest.raises(ValueError, match="importance_sampling_level"):
        LossConfig(importance_sampling_level="turn")


@pytest.mark.slow
def test_a_bf16_sampler_samples_is_refreshed_after_each_step_and_is_corrected(tmp_path):
    trainer = make_trainer(tmp_path, sampler_dtype="bfloat16", steps=2)
    assert trainer.sampler is not None and next(trainer.sampler.parameters()).dtype == torch.bfloat16
    assert next(trainer.model.parameters()).dtype == torch.float32  # the policy itself stays fp32
    history = trainer.train()
    for mine, theirs in zip(trainer.sampler.parameters(), trainer.model.parameters(), strict=True):
        assert torch.equal(mine, theirs.to(torch.bfloat16)), "the sampler lags behind the policy"
    row = history[-1]
    assert 0 < row["sampling/importance_sampling_ratio/max"] <= trainer.config.is_cap
    assert row["sampling/sampling_logp_difference/max"] > 0  # bf16 really is another distribution
    # the episodes carry the sampler's log-probs: a bf16 forward of the same tokens gives them back
    ep = trainer.sample_groups(TASKS[:1])[0]
    ids, mask = torch.tensor([ep.token_ids]), torch.tensor([ep.model_mask])
    recorded = torch.tensor(ep.logprobs)[mask[0].bool()]
    by_sampler = token_logprobs(trainer.sampler, ids, torch.ones_like(ids), mask, 1.0)[0][mask[0].bool()].float()
    by_policy = token_logprobs(trainer.model, ids, torch.ones_like(ids), mask, 1.0)[0][mask[0].bool()]
    assert (by_sampler - recorded).abs().max() < 0.1
    assert (by_policy - recorded).abs().max() > (by_sampler - recorded).abs().max()


@pytest.mark.parametrize("dtype", ["fp16_weights", "int8"])
def test_a_packed_sampler_samples_is_refreshed_after_each_step_and_is_corrected(tmp_path, dtype):
    from agentrl_lite.models import sampling_copy
    from agentrl_lite.quantize import PackedLinear

    def stored(module):
        return {n: m.stored_weight() for n, m in module.named_modules() if isinstance(m, PackedLinear)}

    trainer = make_trainer(tmp_path, sampler_dtype=dtype, steps=2)
    assert any(isinstance(m, PackedLinear) for m in trainer.sampler.modules())
    row = trainer.train()[-1]
    fresh = stored(sampling_copy(trainer.model, dtype))
    for name, mine in stored(trainer.sampler).items():
        assert torch.equal(mine, fresh[name]), f"the sampler lags behind the policy: {name}"
    assert row["sampling/sampling_logp_difference/max"] > 0  # the copy is another distribution ...
    assert 0 < row["sampling/importance_sampling_ratio/max"] <= trainer.config.is_cap  # ... corrected, weights capped


def test_the_sampler_holds_no_weights_during_the_loss_passes_and_samples_again_after(tmp_path, monkeypatch):
    """Its weights are rewritten after the update anyway: freed during the loss passes (the step's memory peak),
    written back afterwards, and written back before sampling if an update raised in between."""
    trainer = make_trainer(tmp_path, sampler_dtype="bfloat16", steps=1)
    held, real = [], grpo.policy_loss

    def spy(*args, **kwargs):
        held.append(sum(p.numel() for p in trainer.sampler.parameters()))
        return real(*args, **kwargs)

    monkeypatch.setattr(grpo, "policy_loss", spy)
    trainer.train()
    assert held and all(n == 0 for n in held), held
    for mine, theirs in zip(trainer.sampler.parameters(), trainer.model.parameters(), strict=True):
        assert torch.equal(mine, theirs.to(torch.bfloat16))
    trainer._park_sampler()  # as an update that raised would leave it
    assert trainer.sample_groups(TASKS[:1]) and all(
        torch.equal(mine, theirs.to(torch.bfloat16))
        for mine, theirs in zip(trainer.sampler.parameters(), trainer.model.parameters(), strict=True))


def test_the_sampler_is_restored_with_the_policy_on_resume(tmp_path):
    trainer = make_trainer(tmp_path / "a", sampler_dtype="bfloat16", steps=1)
    trainer.train()
    trainer.save_checkpoint(tmp_path / "ckpt")
    resumed = make_trainer(tmp_path / "b", sampler_dtype="bfloat16")
    resumed.load_checkpoint(tmp_path / "ckpt")
    for a, b in zip(resumed.sampler.parameters(), trainer.sampler.parameters(), strict=True):
        assert torch.equal(a, b)


def test_stratified_steps_hold_every_kind_and_resume_in_the_same_order(tmp_path):
    kinds = ("single_hop", "two_hop", "comparison")
    tasks = [{**t, "kind": kinds[0] if i < 10 else kinds[1 + i % 2]} for i, t in enumerate(TASKS)]  # 10 / 3 / 3
    model, tokenizer = tiny_policy(seed=0)
    config = GRPOConfig(prompts_per_step=3, stratify_by="kind", seed=1, progress=False)

    def make():
        return GRPOTrainer(model, tokenizer, ArithmeticEnv(tools=[]), tasks, [even_token_reward], config)

    trainer, plain = make(), GRPOTrainer(model, tokenizer, ArithmeticEnv(tools=[]), tasks, [even_token_reward],
                                         GRPOConfig(prompts_per_step=3, seed=1, progress=False))
    steps = [trainer.next_tasks(3) for _ in range(4)]
    assert all(sorted(t["kind"] for t in step) == sorted(kinds) for step in steps), "a step lacks a kind"
    two_hop = [t["question"] for step in steps for t in step if t["kind"] == "two_hop"]
    assert sorted(two_hop[:3]) == sorted(t["question"] for t in tasks if t["kind"] == "two_hop"), "not an epoch"
    assert any(sorted(t["kind"] for t in plain.next_tasks(3)) != sorted(kinds) for _ in range(4)), \
        "without stratify_by the draw should not be stratified"
    trainer.save_checkpoint(tmp_path / "ckpt")
    ahead = [t["question"] for t in trainer.next_tasks(6)]
    resumed = make()
    resumed.load_checkpoint(tmp_path / "ckpt")
    assert [t["question"] for t in resumed.next_tasks(6)] == ahead


@pytest.mark.slow
def test_dynamic_sampling_logs_its_refills(tmp_path):
    """A reward without spread in any group makes dynamic sampling refill as often as it may, and says so."""
    trainer = make_trainer(tmp_path / "a", steps=1, dynamic_sampling=True, max_refills=2)
    trainer.reward_funcs = [lambda prompts, completions, **kwargs: [1.0] * len(completions)]
    assert trainer.step()["sampling/refills"] == 2.0
    assert "sampling/refills" not in make_trainer(tmp_path / "b", steps=1).step()


@pytest.mark.slow
def test_the_loss_sees_importance_weights_only_with_a_cap(tmp_path, monkeypatch):
    seen = []
    real = grpo.policy_loss

    def spy(*args, **kwargs):
        seen.append(kwargs.get("sampling_weights"))
        return real(*args, **kwargs)

    monkeypatch.setattr(grpo, "policy_loss", spy)
    make_trainer(tmp_path / "a", steps=1).train()
    assert seen and all(w is not None for w in seen)
    seen.clear()
    make_trainer(tmp_path / "b", steps=1, is_cap=None).train()
    assert seen and all(w is None for w in seen)


def test_masked_importance_sampling_zeroes_the_over_drawn_tokens_of_an_int8_sampler(tmp_path, monkeypatch):
    """is_mode="mask" (MIS): an int8 sampler over-draws some tokens by more than the cap; they get weight 0."""
    seen = []
    real = grpo.policy_loss

    def spy(*args, **kwargs):
        seen.append(kwargs["sampling_weights"])
        return real(*args, **kwargs)

    monkeypatch.setattr(grpo, "policy_loss", spy)
    row = make_trainer(tmp_path, sampler_dtype="int8", is_mode="mask", is_cap=1.5, steps=1).step()
    weights = torch.cat([w.flatten() for w in seen])
    assert (weights == 0).any() and weights.max() <= 1.5, "tokens above the cap are dropped, the others kept"
    assert row["sampling/masked_fraction"] > 0
    with pytest.raises(ValueError, match="is_mode"):
        GRPOConfig(is_mode="clip")


@pytest.mark.parametrize("on_tools", [False, True])
def test_tool_reply_tokens_get_gradient_only_with_loss_on_tool_tokens(tmp_path, monkeypatch, on_tools):
    """Search-R1's retrieved-token masking: by default no gradient reaches what the tool inserted."""
    episodes = [calculator_episode("It is 391."), calculator_episode("I have computed it.")]
    trainer = make_trainer(tmp_path, loss_on_tool_tokens=on_tools, group_size=2, micro_batch_size=2)
    seen = []
    real = grpo.policy_loss

    def spy(logprobs, *args, **kwargs):
        logprobs.retain_grad()
        seen.append(logprobs)
        return real(logprobs, *args, **kwargs)

    monkeypatch.setattr(grpo, "policy_loss", spy)
    trainer.update(episodes, torch.tensor([1.0, -1.0]))
    grad = seen[0].grad
    assert bool((grad[:, 10:15] != 0).any()) is on_tools  # the tool turn: tokens 10..14
    assert bool((grad[:, 5:10] != 0).all())  # the policy's own first turn, always
    assert bool((grad[:, :5] == 0).all())  # the prompt, never
    assert [m[10:15] for m in trainer.loss_mask(episodes)] == [[int(on_tools)] * 5] * 2


def test_micro_batches_respect_rows_and_tokens():
    assert micro_batches([5, 5, 9, 2], 8, 12) == [[0, 1], [2], [3]]
    assert micro_batches([5] * 5, 2) == [[0, 1], [2, 3], [4]]
    assert micro_batches([30, 1], 8, 10) == [[0], [1]]  # too long for the budget: alone, never dropped
    with pytest.raises(ValueError):
        micro_batches([1], 0)


def test_a_shared_prompt_is_counted_once_in_the_token_budget():
    rows = [[1] * 20 + [2, 3], [1] * 20 + [4], [1] * 20 + [5, 6, 7], [9] * 20]
    masks = [[0] * 20 + [1] * (len(r) - 20) for r in rows]
    shared = shared_with_previous(rows, masks)
    assert shared == [0, 20, 20, 0]  # never past a scored token; the last row shares nothing
    assert pass_tokens([22, 21, 23], shared[:3]) == 20 + 3 * 3  # the prefix once, then three padded tails
    assert pass_tokens([22, 21], [0, 8]) == 2 * 22  # a prefix too short to be run apart counts per row
    assert micro_batches([22, 21, 23, 20], 8, 30, shared) == [[0, 1, 2], [3]]
    assert micro_batches([22, 21, 23, 20], 8, 30) == [[0], [1], [2], [3]]  # without `shared`: rows × width
    rows[1][3] = 7  # a difference inside the prompt ends the shared prefix there
    assert shared_with_previous(rows, masks)[1] == 3


def gradient(trainer: GRPOTrainer) -> torch.Tensor:
    """The trainer's accumulated gradient, flattened (read where its optimizer would step)."""
    return torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None])


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_a_token_budget_changes_the_micro_batches_not_the_gradient(tmp_path, loss_type):
    grads = []
    for budget in (None, 20):
        trainer = make_trainer(tmp_path, loss_type=loss_type, micro_batch_size=8, micro_batch_tokens=budget,
                               max_grad_norm=1e9)  # no clipping: it would hide a wrong scale
        episodes = trainer.sample_groups(trainer.next_tasks(2))
        rewards, _ = trainer.score(episodes)
        advantages = group_advantages(rewards, trainer.config.group_size)
        assert (advantages != 0).any()
        for i, ep in enumerate(episodes):  # unequal token counts, so a wrong per-micro-batch weight shows
            ep.model_mask[len(ep.model_mask) - i % 4:] = [0] * (i % 4)
        if budget:
            shared = shared_with_previous([e.token_ids for e in episodes], [e.model_mask for e in episodes])
            assert len(micro_batches([len(e.token_ids) for e in episodes], 8, budget, shared)) > 1
        trainer.optimizer.step = lambda trainer=trainer: grads.append(gradient(trainer))  # read the gradient, skip the step
        trainer.update(episodes, advantages)
    assert (grads[0] - grads[1]).norm() <= 1e-4 * grads[0].norm(), (grads[0] - grads[1]).norm() / grads[0].norm()


def test_the_loss_pass_takes_episodes_shortest_first(tmp_path):
    """Rows of similar length share a micro-batch (less padding); every episode with a gradient is run once."""
    trainer = make_trainer(tmp_path, micro_batch_size=3, micro_batch_tokens=60)
    episodes = trainer.sample_groups(trainer.next_tasks(2))
    rewards, _ = trainer.score(episodes)
    advantages = group_advantages(rewards, trainer.config.group_size)
    lengths = [len(e.token_ids) for e in episodes]
    if lengths == sorted(lengths):  # make the sampled order one that sorting changes
        episodes, advantages, lengths = episodes[::-1], advantages.flip(0), lengths[::-1]
    assert lengths != sorted(lengths)
    order, chunks = trainer.micro_batch_plan(episodes, advantages)
    assert [lengths[i] for i in order] == sorted(lengths[i] for i in order)
    assert sorted(order) == [i for i in range(len(episodes)) if (advantages[i] != 0).any()]
    assert [i for chunk in chunks for i in chunk] == order


def test_skipping_zero_advantage_episodes_keeps_the_gradient(tmp_path):
    grads, metrics = [], []
    for skip in (False, True):
        trainer = make_trainer(tmp_path, micro_batch_size=3, skip_zero_advantage=skip, max_grad_norm=1e9)
        episodes = trainer.sample_groups(trainer.next_tasks(2))
        rewards, _ = trainer.score(episodes)
        advantages = group_advantages(rewards, trainer.config.group_size)
        advantages[:4] = 0.0  # the first group carries no signal
        assert (advantages[4:] != 0).any()
        for i, ep in enumerate(episodes):  # unequal token counts, so a wrong normaliser shows
            ep.model_mask[len(ep.model_mask) - i % 3:] = [0] * (i % 3)
        calls = []
        forward = trainer.model.forward
        def counted(*a, calls=calls, forward=forward, **k):
            calls.append(k.get("input_ids", a[0] if a else None).shape[0])
            return forward(*a, **k)

        trainer.model.forward = counted
        trainer.optimizer.step = lambda trainer=trainer: grads.append(gradient(trainer))  # read the gradient, skip the step
        metrics.append(trainer.update(episodes, advantages))
        if skip:
            assert sum(calls) <= 4 + 2, "the zero-advantage group must not be run (4 rows, plus shared prefixes)"
    assert (grads[0] - grads[1]).norm() <= 1e-4 * grads[0].norm()
    assert metrics[0]["loss"] == pytest.approx(metrics[1]["loss"], rel=1e-4, abs=1e-7)


@pytest.mark.slow
def test_gradient_checkpointing_trains_the_same_steps_in_the_trainer_and_in_sft(tmp_path, monkeypatch):
    """The switch trades time for memory only: two GRPO steps (the group's shared prompt run once, then the rows)
    and two SFT steps reach the same weights and losses as without it, and the switch reaches the loss pass."""
    from agentrl_lite import logprobs
    from agentrl_lite.sft import SFTConfig, sft
    from agentrl_lite.tasks.arithmetic import calculator_demonstration

    entered = []
    wrapped = logprobs.checkpointed_layers
    monkeypatch.setattr(logprobs, "checkpointed_layers", lambda model: entered.append(1) or wrapped(model))
    runs = {}
    for checkpoint in (False, True):
        trainer = make_trainer(tmp_path / str(checkpoint), gradient_checkpointing=checkpoint)
        trainer.train(steps=2)
        runs[checkpoint] = params(trainer.model), [r["loss"] for r in trainer.history]
    assert entered, "gradient_checkpointing=True never reached the loss pass"
    entered.clear()
    assert runs[True][1] == pytest.approx(runs[False][1], abs=1e-6)
    for name, weight in runs[False][0].items():
        torch.testing.assert_close(runs[True][0][name], weight, atol=1e-5, rtol=0)
    env, losses = ArithmeticEnv(), {}
    conversations = [env.prompt(t)[:1] + calculator_demonstration(t) for t in TASKS[:4]]
    for checkpoint in (False, True):
        model, tokenizer = tiny_policy(seed=0)
        losses[checkpoint] = sft(model, tokenizer, conversations, env.toolbox_for().schemas,
                                 SFTConfig(steps=2, batch_size=4, progress=False, gradient_checkpointing=checkpoint))
    assert entered, "SFTConfig(gradient_checkpointing=True) never reached the loss pass"
    assert losses[True] == pytest.approx(losses[False], abs=1e-5)
