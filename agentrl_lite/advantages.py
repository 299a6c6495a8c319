"""Advantages (pipeline stage: rewards → advantages): how much better each completion, or each turn, did
than its siblings.

Rollouts give us, for every prompt, a *group* of G completions o_1..o_G with scalar rewards r_1..r_G. This
module turns rewards into advantages, the weights the policy loss (`agentrl_lite.loss`) puts on each
completion's tokens. It matches TRL 1.16's GRPOTrainer (`tests/test_trl_equality.py`).

Advantages (group-relative: "was this completion better than its siblings?")::

    A_i = (r_i - mean(r_1..r_G)) / (std + 1e-4)      std: unbiased (Bessel), of the group or of the batch
    Dr. GRPO drops the division (scale_rewards="none"); RLOO uses the mean of the *other* G-1 rewards.

A group whose rewards are all equal gets A_i = 0 exactly: it teaches nothing (TRL's `frac_reward_zero_std`).

Turn-level credit (multi-turn episodes). Episode i has model turns t = 0..T_i-1 with rewards r_it (by default
only the episode reward R_i, received at its last turn); every token of a turn gets that turn's advantage::

    broadcast:   A_it = A_i                                   the episode's advantage on every turn (default)
    discounted:  G_it = Σ_{k≥t} γ^(k-t) r_ik                  return from turn t; terminal only: γ^(T_i-1-t) R_i
                 A_it = (G_it - mean_j G_j0) / (std_j G_j0 + 1e-4)   first_turn: the group's G_0 (default; biased
                                                                     towards late turns, lesson 08's toy)
                 A_it = (G_it - mean_j G_jt) / (std_j G_jt + 1e-4)   per_turn: siblings that reached turn t
    step_group:  A_it = A_i + ω (G_it - mean_S G) / (std_S G + 1e-4)   S: the turns of sibling episodes taken
                 from the same state (GiGPO groups by identical environment state; `step_group_ids` by identical
                 tokens, a stricter stand-in); 0 when S has one member or no spread

With γ = 1 and a terminal reward, discounted is broadcast exactly. γ < 1 (Kevin: 0.4 over refinement turns)
moves credit towards the turns close to the reward: an early turn is credited only for what followed soon.
"""


from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from agentrl_lite.choices import SCALE_REWARDS, TURN_BASELINES, check_choice
from agentrl_lite.episode import Episode


# ----------------------------------------------------------------------------------------- advantages
def _nanstd(x: Tensor, dim: int | None = None) -> Tensor:
    """Unbiased standard deviation ignoring NaN (unscorable completions); NaN when fewer than 2 values."""
    mean = torch.nanmean(x, dim=dim, keepdim=True)
    count = (~torch.isnan(x)).sum(dim=dim, keepdim=True)
    var = torch.nanmean((x - mean) ** 2, dim=dim, keepdim=True) * count / (count - 1)
    std = torch.sqrt(torch.where(count > 1, var, torch.full_like(var, math.nan)))
    return std.squeeze(dim) if dim is not None else std.squeeze()


def _group_baseline_and_scale(
    rewards: Tensor, group_size: int, scale_rewards: str, eps: float
) -> tuple[Tensor, Tensor | None]:
    """(n,) baseline (the group's mean reward) and (n,) divisor (std + eps, or None for scale_rewards="none")."""
    if rewards.dim() != 1 or rewards.numel() % group_size:
        shape = tuple(rewards.shape)
        raise ValueError(f"rewards must be 1-D with a multiple of group_size={group_size} entries, got {shape}")
    groups = rewards.view(-1, group_size)
    flat = _flat_groups(groups)
    # what a typical sibling scored; a group of equal rewards is its own baseline exactly (a float mean of eight
    # 0.7s is 0.7 - 6e-8, and 6e-8 / eps would be an advantage of pure rounding noise)
    baseline = torch.where(flat, _first_scorable(groups), torch.nanmean(groups, dim=1)).repeat_interleave(group_size)
    check_choice("scale_rewards", scale_rewards, SCALE_REWARDS)
    if scale_rewards == "none":
        return baseline, None
    if scale_rewards == "group":
        std = torch.where(flat, 0.0, _nanstd(groups, dim=1)).repeat_interleave(group_size)
    else:  # batch
        std = _nanstd(rewards).expand_as(rewards)
    return baseline, torch.nan_to_num(std, nan=0.0) + eps  # a single scorable value has no spread


def group_advantages(rewards: Tensor, group_size: int, scale_rewards: str = "group", eps: float = 1e-4) -> Tensor:
    """Group-relative advantages of GRPO, exactly as TRL 1.16 computes them.

    Args:
        rewards: (n,) float — one reward per completion; consecutive blocks of `group_size` share a prompt.
            NaN marks an unscorable completion (every reward function returned None): it is left out of its
            group's statistics and gets advantage 0.
        group_size: G, completions per prompt (TRL's num_generations).
        scale_rewards: "group" divides by the group's std (GRPO), "batch" by the std of all n rewards
            (mean still per group), "none" does not divide (Dr. GRPO: std scaling up-weights easy and
            hard prompts whose rewards barely vary).
        eps: added to the std (not under the square root), so a zero-spread group gives 0 / eps = 0.

    Returns:
        (n,) float — A_i = (r_i - mean_group) / (std + eps); std is unbiased (divides by G - 1).
    """
    baseline, scale = _group_baseline_and_scale(rewards, group_size, scale_rewards, eps)
    centred = rewards - baseline  # better (>0) or worse (<0) than its siblings
    return torch.nan_to_num(centred if scale is None else centred / scale, nan=0.0)


def _flat_groups(groups: Tensor) -> Tensor:
    """(groups,) bool — True where at least two rewards are scorable and all scorable rewards are equal."""
    scorable = ~torch.isnan(groups)
    high = torch.where(scorable, groups, -math.inf).amax(dim=1)
    low = torch.where(scorable, groups, math.inf).amin(dim=1)
    return (scorable.sum(dim=1) > 1) & (high == low)


def _first_scorable(groups: Tensor) -> Tensor:
    """(groups,) the first non-NaN reward of each group (NaN when none)."""
    index = (~torch.isnan(groups)).float().argmax(dim=1, keepdim=True)
    return groups.gather(1, index).squeeze(1)


def zero_std_groups(rewards: Tensor, group_size: int) -> Tensor:
    """(groups,) bool — True for a group whose rewards are all equal: every advantage in it is 0, so it
    contributes no policy gradient. A group with fewer than two scorable (non-NaN) rewards has no std and is
    not counted as one, as in TRL. Equal means equal: a std computed from a float mean is 6e-8 for eight
    rewards of 0.7, which `isclose` would call spread (the trainer then stepped AdamW on rounding noise)."""
    return _flat_groups(rewards.view(-1, group_size))


def frac_reward_zero_std(rewards: Tensor, group_size: int) -> float:
    """Share of groups whose rewards are all equal (`zero_std_groups`; TRL's `frac_reward_zero_std`).

    When this is near 1 "nothing learns": the task is too hard (all 0) or too easy (all 1) for the current
    policy. DAPO's dynamic sampling drops exactly these groups and samples replacements.
    """
    return zero_std_groups(rewards, group_size).float().mean().item()


def rloo_advantages(rewards: Tensor, group_size: int) -> Tensor:
    """REINFORCE leave-one-out: the baseline of completion i is the mean reward of its G - 1 siblings.

    Args:
        rewards: (n,) float, consecutive groups of `group_size` (≥ 2).

    Returns:
        (n,) float — A_i = r_i - (Σ_j r_j - r_i) / (G - 1) = G / (G - 1) · (r_i - mean_group). The baseline
        does not depend on r_i itself, so the policy-gradient estimate stays unbiased.
    """
    if group_size < 2:
        raise ValueError("rloo_advantages needs group_size >= 2: the baseline is the mean of the other completions")
    groups = rewards.view(-1, group_size)
    others_mean = (groups.sum(dim=1, keepdim=True) - groups) / (group_size - 1)
    return (groups - others_mean).reshape(-1)


# ---------------------------------------------------------------------------------- turn-level credit
def discounted_returns(turn_rewards: Tensor, turn_mask: Tensor, gamma: float) -> Tensor:
    """Return from each model turn onwards: G_t = Σ_{k≥t} γ^(k-t) r_k, i.e. G_t = r_t + γ G_{t+1}.

    Args:
        turn_rewards: (n, T) float — r_it, the reward of model turn t of episode i (T = most turns in the batch)
        turn_mask: (n, T) 0/1 — 1 on the episode's real turns, which come first (padding at the end)
        gamma: discount per turn; 1 credits every turn with the whole rest of the episode

    Returns:
        (n, T) float — G_it, 0 on padding.
    """
    mask = turn_mask.to(turn_rewards.dtype)
    rewards = turn_rewards * mask
    returns = torch.zeros_like(rewards)
    running = torch.zeros(rewards.shape[0], dtype=rewards.dtype, device=rewards.device)
    for t in reversed(range(rewards.shape[1])):
        running = rewards[:, t] + gamma * running  # what turn t earned, now and (discounted) later
        returns[:, t] = running
    return returns * mask


def discounted_turn_advantages(
    turn_rewards: Tensor,
    turn_mask: Tensor,
    group_size: int,
    gamma: float,
    scale_rewards: str = "group",
    eps: float = 1e-4,
    baseline: str = "first_turn",
) -> Tensor:
    """Per-turn advantages from discounted returns, against a baseline from the sibling episodes.

    baseline="first_turn": A_it = (G_it - mean_j G_j0) / (std_j G_j0 + eps), with G from `discounted_returns` and
    j over the group of sibling episodes. The baseline is one number per prompt (what the siblings achieved from
    the shared start, G_0), so it does not depend on any action; with γ = 1 and only a terminal reward every
    G_it = R_i and this is `group_advantages(R)` on every turn. With γ < 1 a late turn's return γ^(T-1-t) R is
    set against the discounted γ^(T-1) R of the start, so late turns get positive advantages whatever they did.

    baseline="per_turn": A_it = (G_it - mean_j G_jt) / (std_j G_jt + eps), j over the siblings that reached a turn
    t: each turn is compared with the returns of the same turn of the other episodes, so late returns meet late
    returns. A turn no sibling reached has nothing to compare with and gets 0.

    scale_rewards and eps act as in `group_advantages` ("batch": the std over all episodes, per turn with
    "per_turn"; "none": no division).

    Args:
        turn_rewards, turn_mask: (n, T), as in `discounted_returns`; consecutive blocks of `group_size` rows
            share a prompt. An episode without model turns has G_0 = 0.

    Returns:
        (n, T) float — A_it, 0 on padding.
    """
    check_choice("baseline", baseline, TURN_BASELINES)
    returns = discounted_returns(turn_rewards, turn_mask, gamma)
    if returns.shape[1] == 0:
        return returns
    if baseline == "first_turn":
        mean, scale = _group_baseline_and_scale(returns[:, 0], group_size, scale_rewards, eps)
        centred = returns - mean.unsqueeze(1)  # did this turn lead to more than a sibling episode got?
        advantages = centred if scale is None else centred / scale.unsqueeze(1)
        return advantages * turn_mask.to(advantages.dtype)
    advantages = torch.zeros_like(returns)
    for t in range(returns.shape[1]):  # turn t against the same turn of the siblings that reached it
        reached = turn_mask[:, t] > 0
        column = torch.where(reached, returns[:, t], torch.full_like(returns[:, t], math.nan))
        mean, scale = _group_baseline_and_scale(column, group_size, scale_rewards, eps)
        centred = column - mean
        advantages[:, t] = torch.nan_to_num(centred if scale is None else centred / scale, nan=0.0)
    return advantages * turn_mask.to(advantages.dtype)


def step_group_advantages(
    returns: Tensor, turn_mask: Tensor, step_groups: Tensor, scale: bool = True, eps: float = 1e-4
) -> Tensor:
    """GiGPO's step-level advantages: each turn against the other turns taken from the same state.

    Turns of sibling episodes that start from an identical state form a step group S (GiGPO's anchor state is
    the environment's state; the groups `step_group_ids` makes are stricter: identical tokens before the turn). There the only difference between the turns is
    the action, so comparing their returns credits the action itself:

        A^step_it = (G_it - mean_S G) / (std_S G + eps)     std unbiased; 0 when |S| = 1 or no spread

    Args:
        returns: (n, T) float — G_it, e.g. from `discounted_returns`
        turn_mask: (n, T) 0/1 — 1 on real turns
        step_groups: (n, T) int — the step group of each turn: equal ids mean the same state (the
            caller makes ids of different prompts differ); ignored on padding
        scale: divide by the step group's std (GiGPO's default); False centres only

    Returns:
        (n, T) float — A^step_it, 0 on padding. GiGPO's advantage is A_i + ω · A^step_it.
    """
    valid = turn_mask.bool()
    turn_returns = returns[valid]  # (m,) the returns of all real turns
    _, member_of, sizes = torch.unique(step_groups[valid], return_inverse=True, return_counts=True)
    sizes = sizes.to(turn_returns.dtype)
    means = torch.zeros_like(sizes).index_add_(0, member_of, turn_returns) / sizes
    centred = turn_returns - means[member_of]  # better or worse than the other actions taken from this state
    squares = torch.zeros_like(sizes).index_add_(0, member_of, centred**2)
    std = torch.sqrt(squares / (sizes - 1).clamp(min=1.0))  # a turn alone in its state: centred 0, std 0
    step = centred / (std[member_of] + eps) if scale else centred
    out = torch.zeros_like(returns)
    out[valid] = step
    return out


def turn_token_advantages(turn_advantages: Tensor, turn_index: Tensor) -> Tensor:
    """Per-token advantages: every token of model turn t gets A_it (the (batch, seq) input of `policy_loss`).

    Args:
        turn_advantages: (batch, T) float — A_it per model turn
        turn_index: (batch, seq) int — the model turn of each token, -1 on prompt, tool and padding tokens
            (`Episode.model_turn_index`)

    Returns:
        (batch, seq) float — A_it on the tokens of turn t, 0 elsewhere.
    """
    per_token = turn_advantages.gather(1, turn_index.clamp(min=0))
    return torch.where(turn_index >= 0, per_token, torch.zeros_like(per_token))


# ------------------------------------------------------------------------------- episodes → turn tables
TurnRewardFunc = Callable[[Episode], Sequence[float]]
"""per-turn rewards of one episode: one float per model turn (e.g. a process reward)"""


def turn_reward_table(
    episodes: Sequence[Episode], rewards: Tensor, turn_rewards: TurnRewardFunc | None = None
) -> tuple[Tensor, Tensor, Tensor]:
    """Per-turn rewards r_it: the episode reward at the last model turn, plus `turn_rewards(episode)` if given.

    Args:
        rewards: (n,) float — the episode rewards

    Returns:
        turn_rewards (n, T) float, turn_mask (n, T) 0/1 (T: most model turns in the batch, at least 1) and
        extra (n,) float — the sum of the hook's rewards per episode, so rewards + extra is the episode's
        undiscounted return.
    """
    width = max(1, max(len(ep.model_turns) for ep in episodes))
    table, turn_mask = torch.zeros(len(episodes), width), torch.zeros(len(episodes), width)
    extra = torch.zeros(len(episodes))
    for i, ep in enumerate(episodes):
        n_turns = len(ep.model_turns)
        turn_mask[i, :n_turns] = 1.0
        if turn_rewards is not None:
            values = list(turn_rewards(ep))
            if len(values) != n_turns:
                raise ValueError(f"turn_rewards returned {len(values)} rewards for an episode with {n_turns} "
                                 "model turns: return one reward per model turn.")
            table[i, :n_turns] = torch.tensor(values, dtype=torch.float32)
            extra[i] = table[i].sum()
        if n_turns:
            table[i, n_turns - 1] += rewards[i]  # the episode reward arrives with the last turn
    return table, turn_mask, extra


def step_group_ids(episodes: Sequence[Episode], group_size: int, width: int) -> Tensor:
    """(n, width) int — the step group of each model turn: one id per (prompt group, tokens before the turn).

    Sibling turns share an id exactly when everything before them is token-identical: a stricter stand-in for
    GiGPO's anchor state, the identical environment state (two calls that differ only in spacing reach one
    calculator state but are two groups here). All first turns of a group share the prompt; later turns share a state only when the earlier
    turns and tool results were identical. -1 on padding.
    """
    ids: dict[tuple[int, tuple[int, ...]], int] = {}
    table = torch.full((len(episodes), width), -1, dtype=torch.long)
    for i, ep in enumerate(episodes):
        for t, turn in enumerate(ep.model_turns):
            state = (i // group_size, tuple(ep.token_ids[:turn.start]))
            table[i, t] = ids.setdefault(state, len(ids))
    return table
