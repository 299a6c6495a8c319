"""Log-probabilities (pipeline stage: episode → log π_θ): log π_θ(token_t | tokens_<t) for the tokens a
loss needs, and the policy's entropy where it acted.

Both SFT and RL need per-token log-probabilities of given sequences, on a subset of positions (assistant or
policy tokens). Two savings, both exact:

- the vocabulary projection is the most expensive part of a small model's forward pass (49k × hidden for
  every position), so only the positions whose next token is scored are projected;
- the rows of a GRPO batch start with the same prompt (the system prompt and tool schemas at least, the whole
  prompt within a group), so that shared prefix is run once and every row reads its keys and values
  (`share_prefix`); the gradient flows back through them into the one prefix pass.

And one trade of time for memory, exact too: `checkpoint=True` keeps no decoder layer's activations for the
backward pass, only each layer's input, and runs the layer again when its gradient is needed
(`checkpointed_layers`). A pass of 2048 tokens through SmolLM2-135M otherwise keeps about 2 GB of
activations on the CPU, more than the optimizer's state.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch.utils.checkpoint import checkpoint as _checkpoint
from transformers import PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer

from agentrl_lite.models import decoder_layers

PREFIX_MIN_TOKENS = 16
"""a shared prefix shorter than this is run with the rest (a separate pass would not pay for itself)"""


def shared_prefix_length(input_ids: torch.Tensor, attention_mask: torch.Tensor, first_scored: int) -> int:
    """How many leading tokens every row has in common (all real tokens), at most `first_scored`: the prefix never
    contains a scored token, though its last position may predict one."""
    same = (input_ids == input_ids[:1]).all(0) & attention_mask.bool().all(0)
    differs = (~same).nonzero()
    common = int(differs[0]) if differs.numel() else input_ids.shape[1]
    return min(common, first_scored)


@contextlib.contextmanager
def checkpointed_layers(model: PreTrainedModel) -> Iterator[None]:
    """Inside, every decoder layer that runs with gradients keeps only its input for the backward pass and runs
    again when the backward pass reaches it (PyTorch's non-reentrant checkpoint). Exact; costs about one more
    forward pass. A layer must not write a cache in here: the second run would write it twice (`_ReadOnlyPrefixLayer`, `_PrefixRecorder`)."""
    layers = decoder_layers(model)
    for layer in layers:
        forward = layer.forward

        def run(*args, _forward=forward, **kwargs):
            if not torch.is_grad_enabled():
                return _forward(*args, **kwargs)
            return _checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        layer.forward = run  # an instance attribute: it shadows the class's forward until deleted
    try:
        yield
    finally:
        for layer in layers:
            del layer.forward


class _ReadOnlyPrefixLayer(DynamicLayer):
    """One layer's cached prefix that a pass reads and never extends: `update` returns the prefix's keys and values
    followed by the new ones, and stores nothing, so running the layer twice (checkpointing) sees the same cache."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        super().__init__()
        self.keys, self.values = keys, values
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.cat([self.keys, key_states], dim=-2), torch.cat([self.values, value_states], dim=-2)

    def get_seq_length(self) -> int:
        return self.keys.shape[-2]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.keys.shape[-2] + query_length, 0


class _PrefixRecorder(DynamicLayer):
    """One layer's cache for a pass that starts from nothing (the shared prefix): `update` keeps the keys and
    values it is given, replacing rather than appending, so a checkpointed layer that runs twice records once."""

    def __init__(self) -> None:
        super().__init__()
        self.keys = self.values = None

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        self.keys, self.values = key_states, value_states
        self.dtype, self.device, self.is_initialized = key_states.dtype, key_states.device, True
        return key_states, value_states

    def get_seq_length(self) -> int:
        return 0 if self.keys is None else self.keys.shape[-2]

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.get_seq_length() + query_length, 0


class _RowsPass(torch.autograd.Function):
    """The rows' pass as an autograd graph of its own, fed the shared prefix's keys and values.

    In one graph every weight is used twice, by the prefix pass and by the rows' pass, and autograd sums both
    gradients before it adds them to `.grad`: the rows' gradient of every weight waits, in a buffer as large as
    the model's gradients (540 MB for SmolLM2-135M), until the prefix pass's backward has run. Here the rows'
    graph runs its own backward first, which adds straight into `.grad`; then the prefix's keys and values get
    their gradients and the outer backward goes on into the prefix pass. The same gradients, summed in another
    order. forward(run, *prefix): `run(leaves)` is the rows' pass on detached copies of `prefix`.

    Only for a loss that `.backward()` consumes (`token_logprobs(rows_backward_first=True)`, as the GRPO trainer's update asks):
    the rows' gradient goes to `.grad`, so `torch.autograd.grad` would not see it."""

    @staticmethod
    def forward(ctx, run, *prefix):
        leaves = [t.detach().requires_grad_(t.requires_grad) for t in prefix]
        with torch.enable_grad():
            out = run(leaves)
        ctx.graph, ctx.leaves = out, leaves
        return out.detach()

    @staticmethod
    def backward(ctx, grad):
        out, leaves = ctx.graph, ctx.leaves
        ctx.graph = ctx.leaves = None  # the rows' graph is freed by its backward; nothing else holds it
        if out.requires_grad:
            torch.autograd.backward(out, grad)
        return (None, *(leaf.grad for leaf in leaves))


def _logits(model: PreTrainedModel, input_ids: torch.Tensor, attention_mask: torch.Tensor, keep: torch.Tensor,
            share_prefix: bool, checkpoint: bool = False, rows_backward_first: bool = False) -> torch.Tensor:
    """(batch, len(keep), vocab) logits at positions `keep`, with the shared prefix run once when it pays.
    The prefix pass records its cache once (`_PrefixRecorder`), every row reads it through a view, and with
    `rows_backward_first` the rows' pass is a graph of its own (`_RowsPass`). checkpoint: both passes recompute their layers'
    activations in the backward pass (`checkpointed_layers`)."""
    rows = input_ids.shape[0]
    prefix = shared_prefix_length(input_ids, attention_mask, int(keep[0]) + 1) if share_prefix and rows > 1 else 0
    recompute = (lambda: checkpointed_layers(model)) if checkpoint else contextlib.nullcontext  # a fresh one per pass
    if prefix < PREFIX_MIN_TOKENS:
        with recompute():
            return model(input_ids=input_ids, attention_mask=attention_mask, logits_to_keep=keep, use_cache=False).logits
    recorder = Cache(layers=[_PrefixRecorder() for _ in decoder_layers(model)])
    with recompute():
        head = model(input_ids=input_ids[:1, :prefix], past_key_values=recorder, use_cache=True, logits_to_keep=1)
    tail_keep = keep[keep >= prefix] - prefix
    positions = torch.arange(prefix, input_ids.shape[1], device=input_ids.device).expand(rows, -1)

    def run(cached: list[torch.Tensor]) -> torch.Tensor:
        # every row reads the one prefix through a view (expand), not a copy: a copy per row held 28 MB per row of
        # SmolLM2-135M's 618-token tool prompt through the pass, and as much again as its gradient
        cache = Cache(layers=[_ReadOnlyPrefixLayer(keys.expand(rows, -1, -1, -1), values.expand(rows, -1, -1, -1))
                              for keys, values in zip(cached[::2], cached[1::2], strict=True)])
        with recompute():
            return model(input_ids=input_ids[:, prefix:], attention_mask=attention_mask, position_ids=positions,
                         past_key_values=cache, use_cache=True, logits_to_keep=tail_keep).logits

    cached = [t for layer in recorder.layers for t in (layer.keys, layer.values)]
    tail = _RowsPass.apply(run, *cached) if rows_backward_first and torch.is_grad_enabled() else run(cached)
    if keep[0] == prefix - 1:  # the prefix's last position predicts the first scored token
        return torch.cat([head.logits.expand(rows, -1, -1), tail], dim=1)
    return tail


def token_logprobs(
    model: PreTrainedModel,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    score_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
    share_prefix: bool = True,
    checkpoint: bool = False,
    rows_backward_first: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Per-token log-probabilities, computed only where needed.

    Args:
        input_ids: (batch, seq) int — whole sequences (prompt and completion)
        attention_mask: (batch, seq) int — 1 on real tokens, 0 on padding
        score_mask: (batch, seq) int — 1 on tokens to score (e.g. model_mask); position 0 is never scored
        temperature: logits are divided by it, as at sampling time
        share_prefix: run the rows' common prefix once (exact; False runs every row whole)
        checkpoint: keep no layer activations for the backward pass, recompute them (`checkpointed_layers`)
        rows_backward_first: with a shared prefix, the rows' pass backpropagates first, into `.grad` (`_RowsPass`):
            no buffer the size of the gradients, but only a loss consumed by `.backward()` gets every gradient

    Returns:
        (batch, seq) float — log π(input_ids[:, t] | input_ids[:, :t]) where score_mask is 1, else 0;
        with return_entropy, also (batch, seq) float — the entropy of π(· | input_ids[:, :t]) at those
        positions (how unsure the policy was where it acted), detached.
    """
    needed = score_mask[:, 1:].bool()  # token t is predicted by the logits at position t - 1
    keep = needed.any(dim=0).nonzero().squeeze(-1)  # positions some row needs: shared across the batch
    out = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    entropy = torch.zeros_like(out)
    if keep.numel() > 0:
        logits = _logits(model, input_ids, attention_mask, keep, share_prefix, checkpoint, rows_backward_first)
        # (batch, kept, vocab) in float32, the largest tensors of the pass: no scaled copy at temperature 1
        scaled = logits if temperature == 1.0 else logits.float() / temperature
        all_logprobs = torch.log_softmax(scaled, dim=-1, dtype=torch.float32)
        del logits, scaled
        targets = input_ids[:, keep + 1]  # (batch, kept)
        out[:, keep + 1] = all_logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1) * needed[:, keep]
        if return_entropy:
            with torch.no_grad():  # a row at a time: its temporaries are vocabulary-sized, four per position
                rows = torch.stack([entropy_from_logprobs(row) for row in all_logprobs])
                entropy[:, keep + 1] = rows * needed[:, keep]
    return (out, entropy) if return_entropy else out


def entropy_from_logprobs(logprobs: torch.Tensor) -> torch.Tensor:
    """Entropy H(π(· | prefix)) in nats of each next-token distribution, from its log-probabilities:
    (..., vocab) → (...). Tokens of probability 0 (log-probability -inf, e.g. top-k filtered) contribute 0.

    A collapsing entropy means the policy stopped exploring: GRPO then sees identical completions in a
    group and the advantages vanish.
    """
    p_logp = torch.where(torch.isneginf(logprobs), torch.zeros_like(logprobs), logprobs.exp() * logprobs)
    return -p_logp.sum(dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """`entropy_from_logprobs` of raw logits (..., vocab) → (...), computed in float32."""
    return entropy_from_logprobs(torch.log_softmax(logits.float(), dim=-1))


def shared_with_previous(rows: list[list[int]], masks: list[list[int]]) -> list[int]:
    """For each row, how many leading tokens it shares with the row before it (0 for the first), never reaching
    past either row's first scored token (a shared prefix holds no scored token; see `shared_prefix_length`)."""
    out = [0]
    for (a, ma), (b, mb) in zip(zip(rows, masks, strict=True), zip(rows[1:], masks[1:], strict=True), strict=False):
        limit = min(_first_one(ma, len(a)), _first_one(mb, len(b)))
        n = 0
        while n < limit and a[n] == b[n]:
            n += 1
        out.append(n)
    return out


def _first_one(mask: list[int], default: int) -> int:
    return next((i for i, m in enumerate(mask) if m), default)


def pass_tokens(lengths: list[int], shared: list[int] | None = None) -> int:
    """The tokens one pass of `token_logprobs` runs for rows of these lengths (the memory its activations take):
    rows × the longest row, or, when the rows share a prefix that `share_prefix` runs once (shared[i]: tokens row
    i shares with row i − 1), that prefix once plus every row's padded rest."""
    width = max(lengths)
    prefix = min(shared[1:len(lengths)], default=0) if shared is not None and len(lengths) > 1 else 0
    if prefix < PREFIX_MIN_TOKENS:
        return len(lengths) * width
    return prefix + len(lengths) * (width - prefix)


def micro_batches(lengths: list[int], max_rows: int, max_tokens: int | None = None,
                  shared: list[int] | None = None) -> list[list[int]]:
    """Split rows 0..n-1, in order, into micro-batches of at most `max_rows` rows and, when `max_tokens` is set,
    at most `max_tokens` tokens per pass (`pass_tokens`: rows × the longest row, a prefix the rows share counted
    once when `shared` says how many tokens each row shares with the one before); a row longer than `max_tokens`
    goes alone. `micro_batches([5, 5, 9, 2], 8, 12)` → [[0, 1], [2], [3]]."""
    if max_rows < 1:
        raise ValueError(f"micro_batch_size must be at least 1, got {max_rows}")
    out: list[list[int]] = []
    for i in range(len(lengths)):
        if out and len(out[-1]) < max_rows and (max_tokens is None or pass_tokens(
                [lengths[j] for j in out[-1]] + [lengths[i]],
                None if shared is None else [0] + [shared[j] for j in out[-1][1:]] + [shared[i]]) <= max_tokens):
            out[-1].append(i)
        else:
            out.append([i])
    return out
