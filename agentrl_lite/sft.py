"""Cold-start SFT (pipeline stage: before RL): supervised fine-tuning that teaches the format of tool use.

A policy that never emits a tool call gets no reward signal from tools, so RL cannot discover them (the
raw 135M model calls a tool 0 times in 128 samples). A few dozen demonstrations fix that. The loss is
next-token cross-entropy on assistant tokens only: the model should learn to *write* tool calls and
answers, not to predict the tool's output or the user's question.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from tqdm.auto import tqdm
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from agentrl_lite.chat import end_of_turn_id, render
from agentrl_lite.logprobs import micro_batches, shared_with_previous, token_logprobs
from agentrl_lite.models import adamw, large_tensors_mapped, release_memory, save_policy, use_bf16
from agentrl_lite.phases import timed


@dataclass
class SFTConfig:
    """Supervised fine-tuning hyper-parameters."""

    steps: int = 4
    """optimizer steps"""
    batch_size: int = 8
    """conversations per step"""
    lr: float = 1e-4
    """AdamW learning rate"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    max_grad_norm: float = 1.0
    """gradient clipping threshold"""
    seed: int = 0
    """shuffling seed"""
    bf16: bool | str = False
    """bf16 autocast in the forward/backward pass (weights and optimizer stay fp32); about 1.8x faster on a CPU
    with bf16 instructions, several times slower on one without. "auto": where it is fast (`models.bf16_is_fast`)"""
    progress: bool = True
    """show a tqdm bar"""
    micro_batch_tokens: int | None = 1024
    """run each step's batch in passes of at most this many tokens (`logprobs.pass_tokens`: a prefix the rows
    share counted once; gradient accumulation, so the loss and gradient are the batch's): the pass's activations
    take about 1 MB per token for SmolLM2-135M, so this bounds the memory of long conversations. None: the whole
    batch in one pass"""
    lr_schedule: str = "constant"
    """"constant", or "linear": the rate falls in a straight line from `lr` to lr/steps at the last step (TRL's
    default, `lr_scheduler_type="linear"`, without warm-up): the last batches of a short run then move the weights
    less, so what the run ends on depends less on which demonstrations came last"""
    gradient_checkpointing: bool = True
    """keep no decoder layer's activations for the backward pass, only its input, and run the layer again when
    the backward pass needs them (`logprobs.checkpointed_layers`): the same loss and gradient in less memory and
    more time. On by default, as in TRL's SFTConfig: it lowers a lesson's peak memory (results/bench/bench_checkpointing.json)"""

    output_dir: str | None = None
    """save the fine-tuned policy there when training ends (`models.save_policy`: Hugging Face's format, the
    weights or the LoRA adapter and the tokenizer; `load_policy(output_dir)` reloads it). None: keep it in memory"""

    def __post_init__(self) -> None:
        lr_at(0, self)  # a bad schedule name fails where the config is made, before any work


def lr_at(step: int, config: SFTConfig) -> float:
    """The learning rate of optimizer step `step` (0-based) under `config.lr_schedule`."""
    if config.lr_schedule == "constant":
        return config.lr
    if config.lr_schedule == "linear":
        return config.lr * (1 - step / config.steps)
    raise ValueError(f"lr_schedule must be 'constant' or 'linear', got {config.lr_schedule!r}")


def tokenize_conversation(
    tokenizer: PreTrainedTokenizerBase, messages: list[dict], tools: list[dict] | None = None
) -> tuple[list[int], list[int]]:
    """Token ids of a whole conversation and its loss mask (1 on assistant-written tokens).

    Each assistant message is located by rendering the conversation up to it: the prefix with the
    generation prompt ends at the assistant header; the assistant's tokens are its content plus the
    end-of-turn token. Everything else (system, user, tool, headers) gets mask 0.
    """
    eot = tokenizer.decode([end_of_turn_id(tokenizer)])
    ids: list[int] = []
    mask: list[int] = []
    done = ""  # text already tokenised
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prefix = render(tokenizer, messages[:i], tools, add_generation_prompt=True)
        if not prefix.startswith(done):
            raise ValueError("The chat template is not prefix-preserving; cannot mask assistant tokens.")
        context = tokenizer(prefix[len(done):], add_special_tokens=False)["input_ids"]
        answer = tokenizer(message["content"] + eot, add_special_tokens=False)["input_ids"]
        ids += context + answer
        mask += [0] * len(context) + [1] * len(answer)
        done = prefix + message["content"] + eot
    return ids, mask


@timed("sft")
def sft(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    conversations: list[list[dict]],
    tools: list[dict] | Sequence[list[dict] | None] | None = None,
    config: SFTConfig | None = None,
    on_step: Callable[[int], None] | None = None,
) -> list[float]:
    """Fine-tune `model` in place on `conversations`; returns the loss of each step.

    tools: the tool schemas rendered into every conversation's prompt, or one list per conversation
    (tasks that bring their own functions, as in lesson 05).

    on_step: called with the number of steps done after each optimizer step (e.g. to evaluate the policy at
        several lengths of one run: with the constant rate, the first k steps of a longer run are the k-step run);
        it may generate with the model, which is back in training mode when it returns.
    """
    config = config or SFTConfig()
    device = next(model.parameters()).device
    bf16 = use_bf16(config.bf16, device)
    per_conversation = bool(tools) and all(t is None or isinstance(t, list) for t in tools)
    if not conversations:
        raise ValueError("sft: no conversations to learn from.")
    if per_conversation and len(tools) != len(conversations):
        raise ValueError(f"sft: {len(tools)} tool lists for {len(conversations)} conversations.")
    @functools.cache
    def example(i: int) -> tuple[list[int], list[int]]:
        """Conversation i, tokenized when a batch first draws it: a short run over a large demonstration set
        (lesson 11's 3,500 manager prompts) must not render every chat template before its first step."""
        return tokenize_conversation(tokenizer, conversations[i], tools[i] if per_conversation else tools)

    rng = random.Random(config.seed)
    order: list[int] = []
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = adamw(params, lr=config.lr, weight_decay=config.weight_decay)
    model.train()
    losses = []
    with large_tensors_mapped():  # activations of changing sizes: returned whole, not left as heap holes
        for step in tqdm(range(config.steps), desc="SFT", disable=not config.progress):
            if len(order) < config.batch_size:  # reshuffle once the epoch is used up
                order += rng.sample(range(len(conversations)), len(conversations))
            batch = [example(order.pop(0)) for _ in range(config.batch_size)]
            batch.sort(key=lambda example: len(example[0]))  # similar lengths together: less padding, same loss
            n_labels = max(1, sum(sum(m[1:]) for _, m in batch))
            pad = tokenizer.pad_token_id
            optimizer.zero_grad(set_to_none=True)
            total = 0.0
            shared = shared_with_previous([ids for ids, _ in batch], [m for _, m in batch])
            for idx in micro_batches([len(ids) for ids, _ in batch], len(batch), config.micro_batch_tokens, shared):
                part = [batch[i] for i in idx]
                if not any(any(m[1:]) for _, m in part):
                    continue  # no assistant token to learn from in this pass
                width = max(len(ids) for ids, _ in part)
                input_ids = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in part], device=device)
                attention = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in part], device=device)
                labels_mask = torch.tensor([m + [0] * (width - len(m)) for _, m in part], device=device)
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                    logprobs = token_logprobs(model, input_ids, attention, labels_mask,
                                              checkpoint=config.gradient_checkpointing)
                loss = -logprobs.sum() / n_labels  # this pass's share of the mean NLL over the batch's assistant tokens
                loss.backward()
                total += loss.item()
            torch.nn.utils.clip_grad_norm_(params, config.max_grad_norm)
            for group in optimizer.param_groups:
                group["lr"] = lr_at(step, config)
            optimizer.step()
            losses.append(total)
            if on_step is not None:
                on_step(step + 1)
                model.train()
    model.eval()
    optimizer.zero_grad(set_to_none=True)  # the last step's gradients and AdamW's two moments (together three
    del optimizer                          # times the model's size): free them before the next phase starts
    release_memory()
    if config.output_dir is not None:
        save_policy(model, tokenizer, config.output_dir)
    return losses
