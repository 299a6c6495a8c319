"""Rollout (pipeline stage: task → episode): the policy acts, tools answer, until an answer or a budget ends
the episode.

One call runs many episodes at once. Each round samples one model turn for every unfinished episode with the
sampling engine (`agentrl_lite.engine`: each episode's KV cache is kept from turn to turn, the shared prompt
prefix is run once), then executes the tool calls each turn made and appends the tool responses:

    prompt | model turn | tool turn | model turn | ... | end

Tokens in, tokens out: the sampled token ids are appended as they came out of the sampler, and only the
environment's text (tool responses and the next assistant header) is ever tokenised. The per-token
log-probabilities are recorded at sampling time, log π_old(token | prefix) at the sampling temperature,
which is what the RL loss compares its new log-probabilities against.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl_lite.chat import encode_prompt, end_of_turn_id, environment_text, extract_answer, has_tool_call
from agentrl_lite.choices import ENGINES, check_choice
from agentrl_lite.engine import Engine
from agentrl_lite.env import Environment
from agentrl_lite.episode import Episode, Turn
from agentrl_lite.tools import Toolbox


@dataclass
class RolloutConfig:
    """How episodes are sampled and when they end."""

    max_turns: int = 3
    """most model turns per episode; a tool call in the last allowed turn ends with stop_reason max_turns"""
    max_new_tokens: int = 64
    """most tokens the model may write in one turn; a turn cut here ends the episode (max_tokens)"""
    max_episode_tokens: int = 2048
    """most tokens in the whole episode, prompt included; over budget ends the episode (max_tokens)"""
    temperature: float = 1.0
    """sampling temperature; 0 means greedy. Recorded logprobs are log_softmax(logits / temperature)"""
    top_p: float = 1.0
    """nucleus sampling; keep 1.0 for RL so the recorded distribution is the one sampled from"""
    batch_size: int = 32
    """episodes sampled together; when there are more, they are batched by length (shortest first), so
    episodes of similar length share a batch and little padding is attended over"""
    batch_tokens: int | None = None
    """most tokens one sampling batch may hold: its rows × (its longest episode + max_new_tokens), the size of its
    KV cache. Long prompts (lesson 11's whole dialogues) then go in smaller batches than short ones; a batch never
    has fewer than one row. None: only batch_size limits a batch"""
    engine: str = "kv_cache"
    """"kv_cache": `agentrl_lite.engine` (cache kept across turns, shared prefix run once); "generate": one
    `model.generate` call per turn over the whole episode (the reference the engine is tested against)"""
    progress: bool = True
    """show a tqdm bar over turns"""

    def __post_init__(self) -> None:
        check_choice("engine", self.engine, ENGINES)
        if self.batch_tokens is not None and self.batch_tokens <= 0:
            raise ValueError(f"RolloutConfig.batch_tokens must be positive or None, got {self.batch_tokens}.")


@torch.no_grad()
def generate_turns(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    sequences: list[list[int]],
    config: RolloutConfig,
) -> list[tuple[list[int], list[float], bool]]:
    """Sample one turn for each sequence with `model.generate` (the `engine="generate"` path), in one call.

    Returns, per sequence: (new token ids, their logprobs, finished) where finished means the turn
    ended with the end-of-turn token (which is included in the new ids).
    """
    eot = end_of_turn_id(tokenizer)
    device = next(model.parameters()).device
    width = max(len(s) for s in sequences)
    pad = tokenizer.pad_token_id
    input_ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], device=device)
    attention_mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=device)
    greedy = config.temperature <= 0
    out = model.generate(
        input_ids=input_ids,
        attention_mask=attention_mask,
        max_new_tokens=config.max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else config.temperature,
        top_p=None if greedy else config.top_p,
        top_k=None if greedy else 0,
        eos_token_id=eot,
        pad_token_id=pad,
        output_logits=True,
        return_dict_in_generate=True,
    )
    new_ids = out.sequences[:, width:]  # (batch, steps)
    logits = torch.stack(out.logits, dim=1).float()  # (batch, steps, vocab): raw logits per step
    scale = 1.0 if greedy else config.temperature
    logprobs = torch.log_softmax(logits / scale, dim=-1).gather(-1, new_ids.unsqueeze(-1)).squeeze(-1)
    results = []
    for row_ids, row_lp in zip(new_ids.tolist(), logprobs.tolist(), strict=True):
        if eot in row_ids:
            n = row_ids.index(eot) + 1
            results.append((row_ids[:n], row_lp[:n], True))
        else:
            results.append((row_ids, row_lp, False))
    return results


def rollout(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[list[dict]],
    toolbox: Toolbox | Callable[[], Toolbox] | Sequence[Toolbox | None] | None = None,
    config: RolloutConfig | None = None,
    metadata: Sequence[dict] | None = None,
) -> list[Episode]:
    """Run one episode per prompt, all in parallel.

    Args:
        prompts: chat messages per episode (system + user).
        toolbox: the tools offered; a zero-argument factory gives each episode its own (stateful tools
            such as a persistent Python session need that); a list gives one per prompt (tasks that
            each come with their own functions, as in BFCL). None: no tools, a single-turn episode.
        metadata: per-episode dicts stored on `Episode.metadata` (e.g. the gold answer).
    """
    config = config or RolloutConfig()
    if isinstance(toolbox, list | tuple):
        if len(toolbox) != len(prompts):
            raise ValueError(f"rollout: {len(toolbox)} toolboxes for {len(prompts)} prompts.")
        toolboxes = list(toolbox)
    else:
        make_toolbox = toolbox if callable(toolbox) and not isinstance(toolbox, Toolbox) else (lambda: toolbox)
        toolboxes = [make_toolbox() for _ in prompts]
    was_training = model.training
    model.eval()
    episodes = []
    for i, messages in enumerate(prompts):
        schemas = toolboxes[i].schemas if toolboxes[i] else None
        ids = encode_prompt(tokenizer, list(messages), schemas)
        text = tokenizer.decode(ids, skip_special_tokens=False)
        ep = Episode(prompt=list(messages), token_ids=ids, logprobs=[0.0] * len(ids), model_mask=[0] * len(ids),
                     turns=[Turn("prompt", 0, len(ids), text)], metadata=dict(metadata[i]) if metadata else {})
        if len(ids) >= config.max_episode_tokens:
            ep.stop_reason = "max_tokens"
        episodes.append(ep)

    engine = Engine(model, tokenizer.pad_token_id, end_of_turn_id(tokenizer))
    bar = tqdm(total=config.max_turns, desc="rollout turns", disable=not config.progress, leave=False)
    for turn_index in range(config.max_turns):
        active = [i for i, ep in enumerate(episodes) if ep.stop_reason is None]
        if not active:
            break
        for chunk in sampling_batches([len(episodes[i].token_ids) for i in active], config):
            chunk = [active[j] for j in chunk]
            sequences = [episodes[i].token_ids for i in chunk]
            if config.engine == "generate":
                sampled = generate_turns(model, tokenizer, sequences, config)
            else:
                sampled = [(s.token_ids, s.logprobs, s.finished) for s in engine.sample_turn(
                    chunk, sequences, config.max_new_tokens, config.temperature, config.top_p,
                    keep_caches=turn_index < config.max_turns - 1)]
            for i, (new_ids, new_lp, finished) in zip(chunk, sampled, strict=True):
                step(episodes[i], toolboxes[i], tokenizer, new_ids, new_lp, finished,
                     last_turn=turn_index == config.max_turns - 1, config=config)
                if episodes[i].stop_reason is not None:
                    engine.release(i)  # the episode ended: its cache is not needed again
        bar.update(1)
    bar.close()
    model.train(was_training)
    return episodes


def sampling_batches(lengths: list[int], config: RolloutConfig) -> list[list[int]]:
    """Indices of episodes of these lengths (tokens so far), in the batches one turn samples them in: all together
    when they fit `config.batch_size` and `config.batch_tokens`, else by length, shortest first (episodes of similar
    length share a batch, so little padding is attended over), each batch as large as both limits allow."""
    room = config.max_new_tokens

    def fits(rows: int, longest: int) -> bool:
        return rows <= config.batch_size and (config.batch_tokens is None or rows * (longest + room) <= config.batch_tokens)
    if fits(len(lengths), max(lengths, default=0)):
        return [list(range(len(lengths)))] if lengths else []
    batches: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if batches and fits(len(batches[-1]) + 1, lengths[i]):
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


def rollout_env(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    env: Environment,
    tasks: Sequence[dict[str, Any]],
    config: RolloutConfig | None = None,
) -> list[Episode]:
    """One episode per task, run in `env`: the environment's prompt, a fresh toolbox per episode
    (`env.toolbox_for(task)`), the task as `Episode.metadata`. The trainer and `evaluate` run environments
    only through this function."""
    tasks = list(tasks)
    return rollout(model, tokenizer, [env.prompt(t) for t in tasks], [env.toolbox_for(t) for t in tasks],
                   config, metadata=tasks)


def step(
    ep: Episode,
    toolbox: Toolbox | None,
    tokenizer: PreTrainedTokenizerBase,
    new_ids: list[int],
    new_logprobs: list[float],
    finished: bool,
    last_turn: bool,
    config: RolloutConfig,
) -> None:
    """Append one sampled model turn to an episode, then either end it or append the tool responses."""
    start = len(ep.token_ids)
    text = tokenizer.decode(new_ids, skip_special_tokens=False)
    ep.token_ids += new_ids
    ep.logprobs += new_logprobs
    ep.model_mask += [1] * len(new_ids)
    eos = tokenizer.decode([end_of_turn_id(tokenizer)])
    content = text.removesuffix(eos)
    turn = Turn("model", start, len(ep.token_ids), text, content=content, finished=finished)
    ep.turns.append(turn)

    if not finished:  # cut off mid-turn: nothing sensible can follow
        ep.stop_reason = "max_tokens"
        ep.answer = extract_answer(content)
        return
    if toolbox is None or not has_tool_call(content):  # the model spoke to the user: the episode ends
        ep.answer = extract_answer(content)
        ep.stop_reason = "answer" if ep.answer is not None else "no_answer"
        return
    calls, results = toolbox.run(content)
    turn.tool_calls = [c.to_dict() for c in calls]
    turn.tool_results = results
    if last_turn:
        ep.stop_reason = "max_turns"
        return
    env_text = environment_text(tokenizer, ep.messages(), results, toolbox.schemas)
    env_ids = tokenizer(env_text, add_special_tokens=False)["input_ids"]
    if len(ep.token_ids) + len(env_ids) + 1 > config.max_episode_tokens:
        ep.stop_reason = "max_tokens"
        return
    tool_start = len(ep.token_ids)
    ep.token_ids += env_ids
    ep.logprobs += [0.0] * len(env_ids)
    ep.model_mask += [0] * len(env_ids)
    ep.turns.append(Turn("tool", tool_start, len(ep.token_ids), env_text, tool_results=results))
