"""The GRPO trainer (pipeline stage: all of them, in order): rollout → reward → advantage → loss → update,
one readable loop over an `Environment`.

Each step:

1. draw `prompts_per_step` tasks and sample `group_size` episodes for each (the rollout engine, so
   single-turn and multi-turn tasks share one path);
2. score every episode with the reward functions (TRL's signature, called with `rewards.reward_kwargs`, the
   arguments TRL would pass: a text reward reads only what the policy wrote) and sum them with their weights;
3. turn rewards into group-relative advantages: is this episode better than its siblings? In a multi-turn
   episode `credit` decides which turns get the credit (every turn alike, discounted, or per state: GiGPO);
4. optionally drop groups whose rewards have no spread (their advantages are all 0: no signal) and refill
   (DAPO's dynamic sampling), and drop truncated episodes or episodes with a void turn from the loss;
5. `num_iterations` passes of the clipped policy loss on the policy's own tokens only (`model_mask`:
   prompt, tool and environment tokens never receive gradient), with gradient clipping.

Metrics use TRL's names so curves from both trainers can be read the same way. A checkpoint is a Hugging Face
directory (the weights or the LoRA adapter, and the tokenizer: `from_pretrained` and `load_policy` reload it) with
the optimizer, every RNG and the step beside it, so a resumed run continues exactly where an uninterrupted one
would have been.
"""

from __future__ import annotations

import copy
import json
import random
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl_lite.advantages import (
    TurnRewardFunc,
    discounted_returns,
    discounted_turn_advantages,
    frac_reward_zero_std,
    group_advantages,
    step_group_advantages,
    step_group_ids,
    turn_reward_table,
    turn_token_advantages,
    zero_std_groups,
)
from agentrl_lite.choices import CREDITS, REPORT_TO, SCALE_REWARDS, TURN_BASELINES, check_choice
from agentrl_lite.env import Environment
from agentrl_lite.episode import Episode
from agentrl_lite.logprobs import micro_batches, shared_with_previous, token_logprobs
from agentrl_lite.loss import IS_MODES, LossConfig, importance_weights, policy_loss
from agentrl_lite.models import (
    BF16_CHOICES,
    adamw,
    large_tensors_mapped,
    load_saved_weights,
    park_sampling_copy,
    refresh_sampling_copy,
    release_memory,
    sampling_copy,
    save_policy,
    use_bf16,
)
from agentrl_lite.phases import timed
from agentrl_lite.rewards import RewardFunc, reward_kwargs
from agentrl_lite.rollout import RolloutConfig, rollout_env


@dataclass
class GRPOConfig:
    """Hyper-parameters of the GRPO trainer (TRL's names where TRL has the same knob)."""

    steps: int = 20
    """optimizer steps (each on a fresh batch of rollouts, `num_iterations` updates per batch)"""
    prompts_per_step: int = 4
    """distinct tasks per step"""
    group_size: int = 8
    """episodes sampled per task; advantages compare siblings inside a group (TRL: num_generations)"""
    loss: LossConfig = field(default_factory=LossConfig)
    """the policy loss: aggregation (loss_type), clip ranges, KL β, token or sequence ratios (GSPO); its
    max_completion_length (dr_grpo's normaliser) defaults to the rollout's token budget"""
    num_iterations: int = 1
    """policy updates per batch of rollouts (μ in the GRPO paper); >1 makes the clipping matter"""
    scale_rewards: str = "group"
    """group | batch | none: divide centred rewards by the group std, the batch std, or nothing (Dr. GRPO)"""
    dynamic_sampling: bool = False
    """drop groups whose rewards are all equal and sample replacements (DAPO)"""
    max_refills: int = 2
    """with dynamic sampling: at most this many extra rounds of sampling per step"""
    mask_truncated_completions: bool = False
    """exclude episodes cut by a token budget from the loss (DAPO's overlong filtering)"""
    skip_empty_updates: bool = False
    """skip the optimizer step when no token of the batch has a non-zero advantage (every group without reward
    spread, or filtered out) and beta = 0. The gradient is then exactly zero, but AdamW still moves: its
    momentum replays the last real update at nearly full size for several steps (TRL steps anyway, hence the
    default). Skipped steps log update_skipped = 1 and no loss, entropy or grad_norm"""
    skip_zero_advantage: bool = False
    """leave episodes whose every advantage is 0 out of the loss pass (with beta = 0 they add nothing to the
    gradient; they still count in the loss's normaliser, so the gradient is the same). Saves the forward and
    backward of every group without reward spread; the logged entropy and clip ratios then describe the
    episodes that were trained on"""
    filter_void_turns: bool = False
    """exclude episodes containing a void turn (neither a complete tool call nor an answer, see
    `episode.is_void_turn`) from the loss (SimpleTIR); without tools this drops every reply lacking <answer>"""
    loss_on_tool_tokens: bool = False
    """also put the tool replies' tokens (search results, calculator output: what the environment inserted)
    in the loss, as if the policy had written them: Search-R1's ablation of retrieved-token masking. False
    (the default, and Search-R1's choice): the loss sees only the policy's own tokens (model_mask)"""
    credit: str = "broadcast"
    """how the reward reaches the turns of an episode (see agentrl_lite.advantages): "broadcast" puts the episode's
    advantage on every token; "discounted" gives each turn its discounted return against the group's episode
    returns (Kevin); "step_group" adds ω times the turn's return against sibling turns taken from the same
    state (identical tokens before the turn) to the episode's advantage (GiGPO)"""
    gamma: float = 1.0
    """discount per model turn for credit "discounted" and "step_group" (Kevin: 0.4); 1 does not discount"""
    turn_baseline: str = "first_turn"
    """credit "discounted": what a turn's return is compared with. "first_turn": the siblings' returns from their
    first turn, one number per prompt; "per_turn": the siblings' returns from the same turn
    (`advantages.discounted_turn_advantages`)"""
    omega: float = 1.0
    """credit "step_group": weight ω of the step-level advantage added to the episode's (GiGPO: 1)"""
    rollout: RolloutConfig = field(default_factory=lambda: RolloutConfig(max_turns=1, max_new_tokens=64,
                                                                          temperature=1.0, progress=False))
    """how episodes are sampled (temperature, turn and token budgets)"""
    lr: float = 1e-5
    """AdamW learning rate"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """gradient clipping threshold; the pre-clip norm is logged as grad_norm"""
    micro_batch_size: int = 8
    """at most this many episodes per forward/backward pass (gradient accumulation over the batch)"""
    micro_batch_tokens: int | None = None
    """also at most this many tokens per forward/backward pass (`logprobs.pass_tokens`: rows × the longest row,
    a prompt the rows share counted once): the loss pass's activations take about 1 MB per token for SmolLM2-135M
    in bf16 autocast, so this bounds its memory. Consecutive episodes stay together (a group shares its prompt
    prefix); the gradient is the same either way. None: no token cap"""
    bf16_loss: bool | str = False
    """bf16 autocast in the loss pass (1.8x faster on a CPU with bf16 instructions, several times slower on one
    without). "auto": where it is fast (`models.bf16_is_fast`)"""
    gradient_checkpointing: bool = True
    """the loss pass keeps no decoder layer's activations for the backward pass and recomputes them
    (`logprobs.checkpointed_layers`): the same gradient in less memory and more time. On by default, as in TRL's
    GRPOConfig: it lowers a lesson's peak memory (results/bench/bench_checkpointing.json)"""
    sampler_dtype: str | None = None
    """sample with a copy of the policy in this dtype, e.g. "bfloat16" (decoding reads half the weight bytes:
    about 1.6x faster on a CPU with bf16 instructions) or "fp16_weights" (linear weights packed in fp16 for fbgemm,
    `quantize`: for x86 CPUs without fast bf16); the copy is refreshed after every optimizer step and the loss corrects for the sampler's slightly different
    distribution (is_cap). "auto": `models.fast_sampler_dtype`. None, or the policy's own dtype: the policy
    samples"""
    is_cap: float | None = 2.0
    """truncated importance sampling: each policy token's gradient term is weighted by min(π_old / π_sampler,
    is_cap), π_old being the trainer's own log-prob before the update (loss.truncated_importance_weights).
    It also absorbs the small mismatch of a bf16 loss pass. None: no correction (the sampler's log-prob gap is
    still logged)"""
    is_mode: str = "truncate"
    """how tokens the sampler over-drew are corrected: "truncate" caps their weight at is_cap (TIS); "mask" sets
    it to 0 above is_cap (MIS, `loss.masked_importance_weights`)"""
    seed: int = 0
    """seeds task order and sampling"""
    stratify_by: str | None = None
    """a task field (e.g. "kind"): each step's prompts take its values in turn, round robin, each value's tasks in
    their own seeded order epoch after epoch, so that every update holds every value when prompts_per_step is at
    least their number, and no value's gradient is missing from a step (lesson 09: a step of only some question
    kinds moves a decision every kind shares). None: one seeded order over all tasks"""
    checkpoint_every: int = 0
    """save a checkpoint every this many steps into output_dir (0: never)"""
    output_dir: str | None = None
    """where the metrics log (metrics.jsonl) and checkpoints go; None keeps everything in memory"""
    progress: bool = True
    """show a tqdm bar over steps"""
    report_to: str | None = None
    """also send each step's metrics to "tensorboard" (needs the tensorboard package; logs under output_dir)
    or "trackio" (needs trackio); None: the JSONL log and `history` only"""

    def __post_init__(self) -> None:
        check_choice("scale_rewards", self.scale_rewards, SCALE_REWARDS)
        check_choice("credit", self.credit, CREDITS)
        check_choice("turn_baseline", self.turn_baseline, TURN_BASELINES)
        check_choice("report_to", self.report_to, REPORT_TO)
        check_choice("bf16_loss", self.bf16_loss, BF16_CHOICES)
        check_choice("is_mode", self.is_mode, IS_MODES)


class GRPOTrainer:
    """Group Relative Policy Optimisation for single- and multi-turn tool-using episodes.

    Args:
        model, tokenizer: the policy (a peft model trains its adapter only).
        env: the `Environment` (prompt and tools per task; its `score` is for evaluation, not used here).
        tasks: the training tasks (dicts); their fields reach the reward functions as keyword lists.
        reward_funcs: TRL-style `f(prompts, completions, **kwargs) -> list[float | None]`, called with
            `rewards.reward_kwargs(episodes)`.
        reward_weights: one weight per reward function (default 1.0 each).
        turn_rewards: optional per-turn rewards for credit "discounted" and "step_group": a function of an
            episode returning one reward per model turn, added to the episode reward (which the last turn
            receives). None: only the episode reward.
    """

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        env: Environment,
        tasks: Sequence[dict],
        reward_funcs: Sequence[RewardFunc],
        config: GRPOConfig | None = None,
        reward_weights: Sequence[float] | None = None,
        turn_rewards: TurnRewardFunc | None = None,
    ) -> None:
        self.model, self.tokenizer, self.env, self.tasks = model, tokenizer, env, list(tasks)
        self.reward_funcs = list(reward_funcs)
        self.reward_weights = list(reward_weights or [1.0] * len(self.reward_funcs))
        self.turn_rewards = turn_rewards
        self.config = config or GRPOConfig()
        c = self.config
        budget = c.rollout.max_new_tokens * c.rollout.max_turns
        self.loss_config = replace(c.loss, max_completion_length=c.loss.max_completion_length or budget)
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.optimizer = adamw(self.params, lr=c.lr, weight_decay=c.weight_decay)
        self.sampler = sampling_copy(model, c.sampler_dtype)  # a lower-precision copy of the policy that samples
        self.reference = None
        if c.loss.beta > 0 and not hasattr(model, "disable_adapter"):  # with LoRA the base model is the reference
            self.reference = copy.deepcopy(model).eval().requires_grad_(False)
        self.step_count = 0
        self.task_rng = random.Random(c.seed)
        self.order: list[int] = []
        self.strata: dict[str, list[int]] = {}  # with stratify_by: each value's task indices, in first-seen order
        if c.stratify_by is not None:
            for i, task in enumerate(self.tasks):
                self.strata.setdefault(str(task[c.stratify_by]), []).append(i)
        self.queues: dict[str, list[int]] = {value: [] for value in self.strata}
        self.turn = 0
        self.history: list[dict[str, float]] = []
        self.last_episodes: list[Episode] = []
        self._tracker: Callable[[dict[str, float]], None] | None = None
        torch.manual_seed(c.seed)

    # --- data ------------------------------------------------------------------------------------------
    def next_tasks(self, n: int) -> list[dict]:
        """Tasks in a seeded random order, epoch after epoch (with `stratify_by`: the values in turn)."""
        out = []
        for _ in range(n):
            if self.strata:
                value = list(self.strata)[self.turn % len(self.strata)]
                self.turn += 1
                if not self.queues[value]:
                    self.queues[value] = self.task_rng.sample(self.strata[value], len(self.strata[value]))
                out.append(self.tasks[self.queues[value].pop()])
                continue
            if not self.order:
                self.order = self.task_rng.sample(range(len(self.tasks)), len(self.tasks))
            out.append(self.tasks[self.order.pop()])
        return out

    # --- rollout and reward ----------------------------------------------------------------------------
    @timed("rl sampling")
    def sample_groups(self, tasks: list[dict]) -> list[Episode]:
        """`group_size` episodes per task, consecutive (the layout the advantages expect)."""
        self._sync_sampler(only_parked=True)  # an update that raised after parking it
        return rollout_env(self.sampler or self.model, self.tokenizer, self.env,
                           [t for t in tasks for _ in range(self.config.group_size)], self.config.rollout)

    @timed("rl sampling")  # the rewards: a verifier inside is "environment"
    def score(self, episodes: list[Episode]) -> tuple[torch.Tensor, dict[str, float]]:
        """Weighted sum of the reward functions per episode; None (not applicable) counts as 0 in the sum.

        Every reward function gets `reward_kwargs(episodes)`: completions as messages whose text the rewards
        read through `rewards.completion_text`, the policy's own text only (a tool result is not the
        policy's answer), plus the task columns, `completion_lengths`, `tool_calls` and `episodes`.
        """
        kwargs = reward_kwargs(episodes)
        total = torch.zeros(len(episodes))
        metrics = {}
        for fn, weight in zip(self.reward_funcs, self.reward_weights, strict=True):
            values = torch.tensor([np.nan if v is None else v for v in fn(**kwargs)], dtype=torch.float32)
            metrics[f"rewards/{getattr(fn, '__name__', 'reward')}/mean"] = float(np.nanmean(values.numpy())) \
                if not torch.isnan(values).all() else float("nan")
            total += weight * torch.nan_to_num(values, nan=0.0)
        return total, metrics

    # --- one step --------------------------------------------------------------------------------------
    def step(self) -> dict[str, float]:
        c = self.config
        start = time.perf_counter()
        g = c.group_size
        episodes = self.sample_groups(self.next_tasks(c.prompts_per_step))
        rewards, reward_metrics = self.score(episodes)
        frac_zero_std = frac_reward_zero_std(rewards, g)  # groups without spread teach nothing
        spread = ~zero_std_groups(rewards, g)
        reward_mean, reward_std = rewards.mean().item(), rewards.view(-1, g).std(dim=1).mean().item()
        refills = 0
        if c.dynamic_sampling:  # keep only informative groups; refill with new tasks
            for _ in range(c.max_refills):
                if spread.sum() >= c.prompts_per_step:
                    break
                refills += 1
                extra = self.sample_groups(self.next_tasks(c.prompts_per_step))
                extra_rewards, _ = self.score(extra)
                episodes, rewards = episodes + extra, torch.cat([rewards, extra_rewards])
                spread = ~zero_std_groups(rewards, g)
            keep_groups = spread.nonzero().squeeze(-1)[: c.prompts_per_step]
            if len(keep_groups) > 0:
                episodes = [episodes[int(i) * g + j] for i in keep_groups for j in range(g)]
                rewards = rewards.view(-1, g)[keep_groups].reshape(-1)
        advantages, credit_metrics = self.advantages(episodes, rewards)
        # the rollout's KV caches are freed but glibc still holds their pages: hand them back before the update
        # allocates (a trim takes milliseconds; sampling with large tensors mapped instead cost about 8 %)
        release_memory()
        sampled = time.perf_counter()
        with large_tensors_mapped():  # the loss pass's activations: returned whole when freed (models)
            loss_metrics = self.update(episodes, advantages)
        self.step_count += 1
        self.last_episodes = episodes
        n_tokens = [ep.num_model_tokens for ep in episodes]
        void = [ep.has_void_turn for ep in episodes]
        row = {
            "step": self.step_count,
            "reward": reward_mean,
            "reward_std": reward_std,
            **reward_metrics,
            "frac_reward_zero_std": frac_zero_std,
            "completions/mean_length": float(np.mean(n_tokens)),
            "completions/clipped_ratio": float(np.mean([ep.stop_reason == "max_tokens" for ep in episodes])),
            "tools/call_frequency": float(np.mean([ep.num_tool_calls for ep in episodes])),
            "void_turn_ratio": float(np.mean(void)),  # SimpleTIR: share of episodes with a void turn
            "void_turn_filtered": float(sum(void)) if c.filter_void_turns else 0.0,  # left out of the loss
            **credit_metrics,
            **loss_metrics,
            "step_time": time.perf_counter() - start,
            "time/sampling": sampled - start,  # rollouts and rewards, refills included
            **({"sampling/refills": float(refills)} if c.dynamic_sampling else {}),  # extra rounds of sampling
            "time/update": time.perf_counter() - sampled,
        }
        self.history.append(row)
        if c.output_dir:
            Path(c.output_dir).mkdir(parents=True, exist_ok=True)
            with open(Path(c.output_dir) / "metrics.jsonl", "a") as f:
                f.write(json.dumps(row) + "\n")
        if c.report_to:
            self.report(row)
        release_memory()  # this step's episodes, KV caches and activations are gone: hand their pages back
        return row

    def report(self, row: dict[str, float]) -> None:
        """Send one metrics row to the tracker named by `report_to` (created on first use)."""
        if self._tracker is None:
            self._tracker = _make_tracker(self.config)
        self._tracker(row)

    # --- credit assignment -----------------------------------------------------------------------------
    def advantages(self, episodes: list[Episode], rewards: torch.Tensor) -> tuple[torch.Tensor, dict[str, float]]:
        """Advantages as `config.credit` assigns them, and credit metrics.

        Returns (n,) float, one per episode, for "broadcast" (exactly `group_advantages`); (n, T) float, one
        per model turn (T: most model turns in the batch, 0 on padding) for "discounted" and "step_group".
        """
        c = self.config
        if c.credit == "broadcast":
            return group_advantages(rewards, c.group_size, scale_rewards=c.scale_rewards), {}
        turn_rewards, turn_mask, extra = turn_reward_table(episodes, rewards, self.turn_rewards)
        if c.credit == "discounted":
            return discounted_turn_advantages(turn_rewards, turn_mask, c.group_size, c.gamma, c.scale_rewards,
                                              baseline=c.turn_baseline), {}
        episode_advantages = group_advantages(rewards + extra, c.group_size, scale_rewards=c.scale_rewards)
        returns = discounted_returns(turn_rewards, turn_mask, c.gamma)
        groups = step_group_ids(episodes, c.group_size, turn_mask.shape[1])
        step = step_group_advantages(returns, turn_mask, groups, scale=c.scale_rewards != "none")
        _, sizes = torch.unique(groups[turn_mask.bool()], return_counts=True)
        shared = float((sizes[sizes > 1].sum() / sizes.sum()).item()) if sizes.numel() else 0.0
        advantages = (episode_advantages.unsqueeze(1) + c.omega * step) * turn_mask
        return advantages, {"step_groups/shared_turn_ratio": shared}  # turns with a sibling in the same state

    def loss_mask(self, episodes: list[Episode]) -> list[list[int]]:
        """model_mask (plus the tool replies' tokens with loss_on_tool_tokens), zeroed for whole episodes the
        config excludes from the update."""
        masks = []
        for ep in episodes:
            excluded = (self.config.mask_truncated_completions and ep.stop_reason == "max_tokens") or (
                self.config.filter_void_turns and ep.has_void_turn)
            mask = list(ep.model_mask)
            if self.config.loss_on_tool_tokens:
                for turn in ep.turns:
                    if turn.role == "tool":
                        mask[turn.start:turn.end] = [1] * (turn.end - turn.start)
            masks.append([0] * len(mask) if excluded else mask)
        return masks

    def micro_batch_plan(self, episodes: list[Episode], advantages: torch.Tensor,
                         masks: list[list[int]] | None = None) -> tuple[list[int], list[list[int]]]:
        """The episodes the loss pass runs, and its micro-batches (lists of episode indices).

        Episodes with no gradient are left out (`skip_zero_advantage`); the rest go shortest first, so that rows of
        similar length share a micro-batch and little of each pass is padding, while neighbours still share the
        system prompt (`shared_with_previous`). The order changes only the summation order of the gradient.
        """
        c = self.config
        masks = self.loss_mask(episodes) if masks is None else masks
        order = list(range(len(episodes)))
        if c.skip_zero_advantage and c.loss.beta == 0:  # no KL term: a zero-advantage episode has zero gradient
            order = [i for i in order if bool((advantages[i] != 0).any())]
        order.sort(key=lambda i: len(episodes[i].token_ids))  # stable: a group's equal lengths stay together
        shared = shared_with_previous([episodes[i].token_ids for i in order], [masks[i] for i in order]) \
            if c.micro_batch_tokens else None
        chunks = [[order[j] for j in chunk] for chunk in micro_batches(
            [len(episodes[i].token_ids) for i in order], c.micro_batch_size, c.micro_batch_tokens, shared)]
        return order, chunks

    @timed("rl update")
    def update(self, episodes: list[Episode], advantages: torch.Tensor) -> dict[str, float]:
        """`num_iterations` gradient steps of the clipped policy loss over the batch, in micro-batches.

        advantages: (n,) float, one per episode for every token, or (n, T) float, one per model turn.
        """
        c = self.config
        device = next(self.model.parameters()).device
        masks = self.loss_mask(episodes)
        total_tokens = max(1, sum(sum(m) for m in masks))
        token_normalised = c.loss.loss_type in ("dapo", "bnpo")
        sums: dict[str, float] = {}
        gaps: list[tuple[torch.Tensor, torch.Tensor]] = []  # per micro-batch: |log π_old − log π_sampler|, weights
        if c.skip_empty_updates and c.loss.beta == 0 and not any(
            bool((advantages[i] != 0).any()) for i, m in enumerate(masks) if any(m)
        ):
            return {"update_skipped": 1.0}  # zero gradient: an AdamW step would only replay its momentum
        self._park_sampler()  # its weights are rewritten after the update: not held through the loss passes
        self.model.train()
        first: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}  # micro-batch → (π_old, IS weights)
        order, chunks = self.micro_batch_plan(episodes, advantages, masks)
        trained_tokens = max(1, sum(sum(masks[i]) for i in order))
        for iteration in range(c.num_iterations):
            self.optimizer.zero_grad(set_to_none=True)
            for lo, idx in enumerate(chunks):
                width = max(len(episodes[i].token_ids) for i in idx)
                pad = self.tokenizer.pad_token_id

                def batch(rows: list[list], fill: float, width: int = width) -> list[list]:
                    return [r + [fill] * (width - len(r)) for r in rows]  # right-pad to the micro-batch

                if not any(any(masks[i]) for i in idx):
                    continue  # nothing to learn from here (e.g. every episode masked as truncated)
                ids = torch.tensor(batch([episodes[i].token_ids for i in idx], pad), device=device)
                attention = torch.tensor(batch([[1] * len(episodes[i].token_ids) for i in idx], 0), device=device)
                mask = torch.tensor(batch([masks[i] for i in idx], 0), device=device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=use_bf16(c.bf16_loss, device)):
                    logprobs, entropy = token_logprobs(self.model, ids, attention, mask, c.rollout.temperature,
                                                       return_entropy=True, checkpoint=c.gradient_checkpointing,
                                                       rows_backward_first=True)  # no gradient-sized buffer
                    ref = self.reference_logprobs(ids, attention, mask) if c.loss.beta > 0 else None
                if iteration == 0:  # π_old: the trainer's own log-probs before this update (exact: no step yet)
                    old, weights = logprobs.detach(), None
                    # only sampled tokens have a sampler log-prob; elsewhere weight 1
                    sampled = torch.tensor(batch([episodes[i].logprobs for i in idx], 0.0), device=device)
                    drawn = torch.tensor(batch([episodes[i].model_mask for i in idx], 0), device=device) * mask
                    if c.is_cap is not None:
                        weights = importance_weights(old, sampled, drawn, c.is_cap, c.is_mode)
                    logged = weights if weights is not None else torch.exp((old - sampled) * drawn)  # uncorrected
                    gaps.append(((old - sampled).abs()[drawn.bool()], logged[drawn.bool()]))
                    first[lo] = (old, weights)
                old, weights = first[lo]
                adv = advantages[idx].to(device)
                if adv.dim() == 2:  # per model turn: each token gets its turn's advantage
                    turn_index = torch.tensor(batch([episodes[i].model_turn_index for i in idx], -1), device=device)
                    adv = turn_token_advantages(adv, turn_index)
                loss, metrics = policy_loss(logprobs, old, adv, mask.float(), self.loss_config, ref_logprobs=ref,
                                            sampling_weights=weights)
                n_tok = mask.sum().item()
                weight = n_tok / total_tokens if token_normalised else len(idx) / len(episodes)
                (loss * weight).backward()  # accumulated micro-batches reproduce the full-batch loss
                metrics = {"loss": loss.item(), **metrics,
                           "entropy": (entropy * mask).sum().item() / max(1, n_tok)}
                # the loss is the full batch's; other metrics average over the episodes trained on
                share = n_tok / trained_tokens if token_normalised else len(idx) / len(order)
                for k, v in metrics.items():
                    sums[k] = sums.get(k, 0.0) + (weight if k == "loss" else share) * float(v) / c.num_iterations
            if all(p.grad is None for p in self.params):  # no token in the loss: no update, not a crash
                sums["grad_norm"] = sums.get("grad_norm", 0.0)
                continue
            grad_norm = torch.nn.utils.clip_grad_norm_(self.params, c.max_grad_norm)
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)  # gradients are 540 MB for SmolLM2: not kept while sampling
            sums["grad_norm"] = sums.get("grad_norm", 0.0) + grad_norm.item() / c.num_iterations
        self._sync_sampler()  # the next rollout samples from the updated policy
        self.model.eval()
        return {**sums, **_sampling_metrics(gaps), "update_skipped": 0.0}

    def _park_sampler(self) -> None:
        """Free the sampler's weights until `_sync_sampler` writes them again (`models.park_sampling_copy`)."""
        if self.sampler is not None:
            park_sampling_copy(self.sampler)

    def _sync_sampler(self, only_parked: bool = False) -> None:
        """Write the policy's weights into the sampler. only_parked: only if `_park_sampler` left it without."""
        if self.sampler is not None:
            refresh_sampling_copy(self.sampler, self.model, only_parked)

    def reference_logprobs(self, ids: torch.Tensor, attention: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            if self.reference is not None:
                return token_logprobs(self.reference, ids, attention, mask, self.config.rollout.temperature)
            with self.model.disable_adapter():
                return token_logprobs(self.model, ids, attention, mask, self.config.rollout.temperature)

    # --- the loop, checkpoints -------------------------------------------------------------------------
    def train(self, steps: int | None = None) -> list[dict[str, float]]:
        """Run until `steps` (default config.steps) optimizer steps have been taken in total."""
        target = steps if steps is not None else self.config.steps
        bar = tqdm(total=target, initial=self.step_count, desc="GRPO", disable=not self.config.progress)
        while self.step_count < target:
            row = self.step()
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward']:.3f}", zero_std=f"{row['frac_reward_zero_std']:.2f}")
            every = self.config.checkpoint_every
            if every and self.config.output_dir and self.step_count % every == 0:
                self.save_checkpoint(Path(self.config.output_dir) / "checkpoint")
        bar.close()
        return self.history

    def save_checkpoint(self, path: str | Path) -> Path:
        """The policy in Hugging Face's format (`models.save_policy`: safetensors weights, or the LoRA adapter, and
        the tokenizer) and, in trainer_state.pt beside it, what an exact resume needs: optimizer, RNG states, data
        order, step and history. Written to a temporary folder and then renamed, so an interrupted save leaves
        the previous checkpoint whole."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp")
        if tmp.exists():
            shutil.rmtree(tmp)  # a save interrupted earlier
        save_policy(self.model, self.tokenizer, tmp)
        torch.save({
            "optimizer": self.optimizer.state_dict(),
            "step": self.step_count,
            "order": self.order,
            "queues": self.queues,
            "turn": self.turn,
            "task_rng": self.task_rng.getstate(),
            "python_rng": random.getstate(),
            "numpy_rng": np.random.get_state(),
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
            "history": self.history,
            "config": asdict(self.config),
        }, tmp / TRAINER_STATE)
        if path.exists():
            shutil.rmtree(path)
        tmp.rename(path)
        return path

    def load_checkpoint(self, path: str | Path) -> None:
        """Restore everything `save_checkpoint` saved; training then continues as if never stopped."""
        path = Path(path)
        if not (path / TRAINER_STATE).is_file():
            raise FileNotFoundError(f"{path} holds no {TRAINER_STATE}: not a checkpoint of GRPOTrainer.save_checkpoint "
                                    "(to start from saved weights only, load them with load_policy(path)).")
        state = torch.load(path / TRAINER_STATE, weights_only=False)
        load_saved_weights(self.model, path)
        self._sync_sampler()
        self.optimizer.load_state_dict(state["optimizer"])
        self.step_count, self.order, self.history = state["step"], state["order"], state["history"]
        self.queues, self.turn = state.get("queues", self.queues), state.get("turn", 0)
        self.task_rng.setstate(state["task_rng"])
        random.setstate(state["python_rng"])
        np.random.set_state(state["numpy_rng"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] is not None:
            torch.cuda.set_rng_state_all(state["cuda_rng"])


TRAINER_STATE = "trainer_state.pt"
"""the file beside a checkpoint's weights that holds the rest of the trainer's state"""


def _sampling_metrics(gaps: list[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, float]:
    """How far the sampler's log-probs were from the trainer's, and the importance weights (TRL's names)."""
    if not gaps:
        return {}
    delta, weights = torch.cat([d for d, _ in gaps]).float(), torch.cat([w for _, w in gaps]).float()
    if delta.numel() == 0:
        return {}
    return {"sampling/sampling_logp_difference/mean": delta.mean().item(),
            "sampling/sampling_logp_difference/max": delta.max().item(),
            "sampling/importance_sampling_ratio/min": weights.min().item(),
            "sampling/importance_sampling_ratio/mean": weights.mean().item(),
            "sampling/importance_sampling_ratio/max": weights.max().item(),
            "sampling/masked_fraction": (weights == 0).float().mean().item()}  # tokens MIS dropped (is_mode "mask")


def _make_tracker(config: GRPOConfig) -> Callable[[dict[str, float]], None]:
    """A function that logs a metrics row to TensorBoard or trackio; a clear error if the package is missing."""
    package = "tensorboard" if config.report_to == "tensorboard" else "trackio"
    try:
        if config.report_to == "tensorboard":
            from torch.utils.tensorboard import SummaryWriter

            writer = SummaryWriter(log_dir=config.output_dir)

            def log(row: dict[str, float]) -> None:
                for key, value in row.items():
                    if key != "step":
                        writer.add_scalar(key, value, row["step"])
                writer.flush()

            return log
        import trackio
    except ImportError as error:
        raise ImportError(f"report_to={config.report_to!r} needs the {package} package: pip install {package}") from error
    trackio.init(project="agentrl_lite", config=asdict(config))
    return lambda row: trackio.log({k: v for k, v in row.items() if k != "step"}, step=int(row["step"]))
