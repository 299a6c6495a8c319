"""A multi-turn toy where the true credit of every turn is known (task family, lesson 08).

On an LLM nobody knows how much each turn of an episode contributed to its reward, so the credit rules of
`agentrl_lite.advantages` (broadcast, discounted against the first turn's or the same turn's returns,
step-grouped) can only be compared by how fast a policy
learns, over noisy runs. Here they can be compared with the truth.

The task. An episode has `turns` turns; at turn t the agent is in one of `states` states and picks one of
`actions` actions with a tabular softmax policy π_θ(a | t, s) (θ: one logit per turn, state and action, as in
lesson 03). One action per (t, s) is right and earns 1/turns; what the agent picks also decides the next state
(a fixed random transition table), and a wrong action tends to lead to a state where the next right action is
less likely under the current policy, so early turns have delayed consequences. Every episode starts in state
0. The rewards reach the rules in one of two ways (`reward_at`): only the total return R = Σ_t r_t, at the end,
as an episode reward does for an LLM agent; or each r_t with its turn, as a process reward does. With only the
end reward and episodes of equal length, discounting against a per-turn baseline is broadcast exactly (every
G_it is γ^(T-1-t) R_i, and the per-turn mean and std scale by the same γ^(T-1-t)).

The truth. With the table, dynamic programming gives the exact advantage of every action,
A^π_t(s, a) = Q^π_t(s, a) − V^π_t(s): how much better taking a at (t, s) is than the policy's average, counting
everything that follows. It also gives the exact policy gradient ∇_θ J, J = E_π[R], by the policy-gradient
theorem: ∂J / ∂θ[t, s, a] = d_t(s) π(a | t, s) A^π_t(s, a), with d_t the state distribution at turn t.

A credit rule turns a group of sampled episodes into per-turn advantages Â_it; its policy-gradient estimate is
ĝ = (1 / n) Σ_i Σ_t Â_it ∇_θ log π(a_it | t, s_it). `credit_study` measures, for each rule, over many random
tasks (seeds): the correlation of Â with the true A on the sampled turns, the cosine between ĝ and ∇J, the
gradient's signal-to-noise ratio ‖E ĝ‖ / √E‖ĝ − E ĝ‖², and how far gradient ascent with ĝ gets in a fixed
number of steps of equal length (θ ← θ + lr ĝ / ‖ĝ‖, so a rule whose advantages are larger does not simply take
larger steps). The rules are the library's own functions, with the same γ and the same reward for all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agentrl_lite.advantages import (
    discounted_returns,
    discounted_turn_advantages,
    group_advantages,
    step_group_advantages,
)

RULES = ("broadcast", "discounted", "discounted_per_turn", "step_group")
REWARD_AT = ("end", "each_turn")


@dataclass
class CreditToy:
    """One random task: the right action and the next state for every (turn, state, action)."""

    turns: int = 6
    states: int = 4
    actions: int = 4
    seed: int = 0

    def __post_init__(self) -> None:
        rng = np.random.default_rng(self.seed)
        self.right = rng.integers(0, self.actions, size=(self.turns, self.states))  # (T, S) the rewarded action
        self.next_state = rng.integers(0, self.states, size=(self.turns, self.states, self.actions))  # (T, S, A)
        self.reward = np.zeros((self.turns, self.states, self.actions))  # (T, S, A) r_t(s, a)
        t, s = np.meshgrid(range(self.turns), range(self.states), indexing="ij")
        self.reward[t, s, self.right] = 1.0 / self.turns

    def policy(self, theta: np.ndarray) -> np.ndarray:
        """(T, S, A) π(a | t, s) from logits θ of the same shape."""
        z = np.exp(theta - theta.max(-1, keepdims=True))
        return z / z.sum(-1, keepdims=True)

    def exact(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(true advantages A (T, S, A), the exact gradient ∇_θ J (T, S, A), J) by dynamic programming."""
        pi = self.policy(theta)
        q = np.zeros((self.turns, self.states, self.actions))
        v_next = np.zeros(self.states)
        for t in reversed(range(self.turns)):
            q[t] = self.reward[t] + v_next[self.next_state[t]]  # Q_t(s, a) = r_t(s, a) + V_{t+1}(s')
            v_next = (pi[t] * q[t]).sum(-1)
        v = (pi * q).sum(-1, keepdims=True)
        advantage = q - v
        d = np.zeros((self.turns, self.states))  # d_t(s): probability of being in s at turn t
        d[0, 0] = 1.0
        for t in range(self.turns - 1):
            for s in range(self.states):
                np.add.at(d[t + 1], self.next_state[t, s], d[t, s] * pi[t, s])
        gradient = d[..., None] * pi * advantage
        return advantage, gradient, float(v[0, 0, 0])

    def sample(self, theta: np.ndarray, episodes: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(states, actions), each (episodes, T) int: episodes sampled from π_θ."""
        pi = self.policy(theta)
        states = np.zeros((episodes, self.turns), dtype=int)
        actions = np.zeros((episodes, self.turns), dtype=int)
        s = np.zeros(episodes, dtype=int)
        for t in range(self.turns):
            cdf = pi[t, s].cumsum(-1)
            a = (rng.random((episodes, 1)) > cdf).sum(-1).clip(max=self.actions - 1)
            states[:, t], actions[:, t] = s, a
            s = self.next_state[t, s, a]
        return states, actions


def rule_advantages(rule: str, toy: CreditToy, states: np.ndarray, actions: np.ndarray, group_size: int,
                    gamma: float, omega: float = 1.0, reward_at: str = "end") -> np.ndarray:
    """(n, T) per-turn advantages of one credit rule for sampled episodes whose consecutive blocks of
    `group_size` share a prompt (here: every episode starts in state 0 of the same task). reward_at="end": the
    return arrives at the last turn, as an episode reward does (`advantages.turn_reward_table`); "each_turn":
    each turn's reward arrives with it, as lesson 08's process reward does. Broadcast sees only the total."""
    n, turns = states.shape
    episode_return = torch.tensor(toy.reward[np.arange(turns), states, actions].sum(1))
    turn_rewards = torch.zeros(n, turns, dtype=torch.float64)
    if reward_at == "end":
        turn_rewards[:, -1] = episode_return
    elif reward_at == "each_turn":  # r_t with its turn, as a process reward arrives
        turn_rewards = torch.tensor(toy.reward[np.arange(turns), states, actions], dtype=torch.float64)
    else:
        raise ValueError(f"reward_at={reward_at!r}: use one of {REWARD_AT}")
    mask = torch.ones(n, turns, dtype=torch.float64)
    if rule == "broadcast":
        out = group_advantages(episode_return, group_size).unsqueeze(1).expand(n, turns)
    elif rule == "discounted":  # every turn against the group's returns from the first turn
        out = discounted_turn_advantages(turn_rewards, mask, group_size, gamma)
    elif rule == "discounted_per_turn":  # every turn against the siblings' returns from the same turn
        out = discounted_turn_advantages(turn_rewards, mask, group_size, gamma, baseline="per_turn")
    elif rule == "step_group":  # GiGPO: the episode's advantage plus ω · the turn against its anchor state
        prompt = torch.arange(n) // group_size
        ids = (prompt[:, None] * turns + torch.arange(turns)[None]) * toy.states + torch.tensor(states)
        returns = discounted_returns(turn_rewards, mask, gamma)
        out = group_advantages(episode_return, group_size).unsqueeze(1) + omega * step_group_advantages(
            returns, mask, ids)
    else:
        raise ValueError(f"unknown credit rule {rule!r}; choose one of {RULES}")
    return out.numpy()


def gradient_estimate(toy: CreditToy, theta: np.ndarray, states: np.ndarray, actions: np.ndarray,
                      advantages: np.ndarray) -> np.ndarray:
    """(T, S, A) ĝ = (1/n) Σ_i Σ_t Â_it ∇_θ log π(a_it | t, s_it), with ∇ log softmax = onehot(a) − π."""
    pi = toy.policy(theta)
    g = np.zeros_like(theta)
    n, turns = states.shape
    for t in range(turns):
        onehot = np.eye(toy.actions)[actions[:, t]]
        np.add.at(g[t], states[:, t], advantages[:, t, None] * (onehot - pi[t, states[:, t]]))
    return g / n


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float((a * b).sum() / (np.linalg.norm(a) * np.linalg.norm(b) + 1e-12))


def study_one(seed: int, rules: tuple[str, ...] = RULES, group_size: int = 8, prompts: int = 4, gamma: float = 0.9,
              batches: int = 100, train_steps: int = 30, lr: float = 0.5, omega: float = 1.0,
              reward_at: str = "end", **toy_kwargs: int) -> dict[str, dict]:
    """Every rule's measurements on the task and initial policy of one seed (the same for every rule); omega is
    the step-grouped rule's weight of the step term, reward_at when the rules see the rewards (`rule_advantages`)."""
    toy = CreditToy(seed=seed, **toy_kwargs)
    rng = np.random.default_rng(10_000 + seed)
    theta0 = rng.normal(0.0, 1.0, size=(toy.turns, toy.states, toy.actions))
    true_a, true_g, j0 = toy.exact(theta0)
    out: dict[str, dict] = {}
    for rule in rules:
        draws = np.random.default_rng(seed)  # every rule sees the same episodes
        grads, correlations = [], []
        for _ in range(batches):
            states, actions = toy.sample(theta0, prompts * group_size, draws)
            adv = rule_advantages(rule, toy, states, actions, group_size, gamma, omega, reward_at)
            truth = true_a[np.arange(toy.turns), states, actions]
            if adv.std() > 0 and truth.std() > 0:
                correlations.append(float(np.corrcoef(adv.ravel(), truth.ravel())[0, 1]))
            grads.append(gradient_estimate(toy, theta0, states, actions, adv))
        grads_arr = np.stack(grads)
        mean = grads_arr.mean(0)
        noise = np.sqrt(((grads_arr - mean) ** 2).sum(axis=(1, 2, 3)).mean())
        theta, curve = theta0.copy(), [j0]
        for _ in range(train_steps):  # steps of equal length: a rule's larger advantages are not a larger lr
            states, actions = toy.sample(theta, prompts * group_size, draws)
            g = gradient_estimate(toy, theta, states, actions,
                                  rule_advantages(rule, toy, states, actions, group_size, gamma, omega, reward_at))
            theta = theta + lr * g / (np.linalg.norm(g) + 1e-12)
            curve.append(toy.exact(theta)[2])
        out[rule] = {"correlation_with_true_advantage": float(np.mean(correlations)),
                     "cosine_with_true_gradient": float(np.mean([_cosine(g, true_g) for g in grads])),
                     "gradient_snr": float(np.linalg.norm(mean) / (noise + 1e-12)),
                     "expected_return_curve": curve}
    return out


MEASURES = ("correlation_with_true_advantage", "cosine_with_true_gradient", "gradient_snr", "final_expected_return")


def credit_study(seeds: range | list[int] = range(20), **kwargs) -> dict:
    """`study_one` over many seeds: per rule and measure, every seed's value and the mean with its t interval,
    and each rule's paired difference from broadcast (same seeds, same tasks, same episodes)."""
    from agentrl_lite.stats import mean_ci

    runs = [study_one(seed, **kwargs) for seed in seeds]
    for run in runs:
        for values in run.values():
            values["final_expected_return"] = values["expected_return_curve"][-1]
    rules = list(runs[0])
    out: dict = {"seeds": list(seeds), "settings": kwargs, "rules": {}, "versus_broadcast": {}}
    for rule in rules:
        out["rules"][rule] = {m: {"per_seed": (v := [run[rule][m] for run in runs]), **mean_ci(v).to_dict()}
                              for m in MEASURES}
        out["rules"][rule]["mean_curve"] = np.mean([run[rule]["expected_return_curve"] for run in runs], 0).tolist()
        if rule != "broadcast":
            out["versus_broadcast"][rule] = {m: mean_ci([run[rule][m] - run["broadcast"][m] for run in runs]).to_dict()
                                             for m in MEASURES}
    return out

