"""The sampling engine (inside the rollout stage): one model turn for many episodes at once, without
`model.generate`, keeping every episode's KV cache from one turn to the next.

Sampling is the slowest part of an RL step on a small model. What this engine does differently, and why:

- **KV cache kept across turns.** An episode's keys and values stay in memory between its turns; the next turn
  runs only the tokens appended since (the end-of-turn token and the tool's reply), never the conversation again.
- **Shared prompt prefix, stored once.** The system prompt and tool schemas are identical for every episode of a
  batch: they are run once, and their keys and values are kept once, not copied to every row. Attention reads them
  through `_prefix_attention`: a decoded token splits each row's softmax into the shared part and the row's own
  part; a chunk of several tokens (the prompts after the prefix, a tool's reply) has the prefix put in front of
  each row's keys for one layer at a time and goes through SDPA's fused kernel. With lesson 11's 620-token manager
  prompt, a copy per row made the prefix most of a batch's cache (and of the memory every decoding step reads).
  Identical prompts (a GRPO group) are run once too.
- **A pre-allocated cache.** Each decoding step writes its keys and values in place; a growing cache that
  concatenates at every step copies the whole cache every step (quadratic in the turn's length).
- **One log-probability per step.** Only the sampled token's log π is kept, never the vocabulary's logits.
- **Key spans that grow in steps** (`KEY_SPAN_STEP`): attention reads a row's keys 64 columns at a time, the unwritten
  ones masked, so a whole decode meets a few matrix shapes, not one per token (oneDNN keeps a compiled kernel per
  shape of a bf16 product on a CPU).
- **Finished rows leave the batch**, instead of decoding padding until the slowest row ends; the rows that stay are
  moved up within the same buffers (`_Batch.compact`), never copied into new ones.

Layout. A batch holds the shared prefix once, (layers, kv_heads, prefix, head_dim), and B rows in one buffer per
layer, (B, kv_heads, capacity, head_dim), for every token after the prefix. Every row writes its next token at the
same column; `valid` marks the columns that hold a real token of that row (padding between
a row's cached tokens and its new ones is never attended to), and each row has its own position ids, so the
result is the one a single unpadded sequence would give. Exactness is tested: the recorded log-probabilities
equal a fresh forward pass over the whole episode within 1e-4, and greedy decoding writes the tokens
`model.generate` writes (tests/test_engine.py).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.cache_utils import Cache, DynamicLayer
from transformers.integrations.sdpa_attention import sdpa_attention_forward

PREFIX_MIN_TOKENS = 8
"""shorter shared prefixes are not worth a separate forward pass"""
PREFILL_TOKENS = 4096
"""distinct prompts are prefilled in groups of similar length of at most this many tokens, padding included"""
COMPACT_SHARE = 0.25
"""drop finished rows from the batch once they are at least this share of it"""
SHARE_MIN_ROWS = 8
"""batches of fewer rows copy the shared prefix into each row after the prefill: few copies cost little memory,
and SDPA's single kernel decodes a small batch faster than `_prefix_attention`'s separate operations"""

KEY_SPAN_STEP = 64
"""attention reads each row's keys in spans that grow in steps of this many columns, the columns not yet written
masked. On a CPU, oneDNN compiles and caches a kernel per matrix shape for bf16 products; a span that grew by one
column per decoded token gave every step new shapes, and the cached kernels took gigabytes in lesson 05's bf16
BFCL evaluation (docs/design/05_rl_for_tool_calls.md)"""

PREFIX_ATTENTION = "agentrl_shared_prefix"
"""the name `_prefix_attention` is registered under in transformers' `AttentionInterface`"""
_PREFIX: contextvars.ContextVar[tuple[torch.Tensor, torch.Tensor] | None] = contextvars.ContextVar(
    "agentrl_shared_prefix", default=None)


def _prefix_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                      **kwargs) -> tuple[torch.Tensor, None]:
    """Attention over a prefix every row shares, stored once, followed by each row's own keys.

    query (B, H, q, D); key and value (B, kv_heads, L, D): the rows' own tokens; attention_mask (B, 1, q, L),
    additive, over those L columns only (the prefix precedes every query and is visible to all of them). The
    prefix's keys and values, (layers, kv_heads, P, D), come from `_PREFIX`. One softmax over P + L columns, computed
    in two parts that share its maximum and its normaliser: the prefix is multiplied once for all rows, as one
    matrix of B·q queries, never copied per row. Without a prefix set, this is transformers' SDPA attention.

    A chunk of q > 1 tokens takes SDPA over the prefix and the row's keys concatenated instead (a copy of one
    layer's prefix per row, freed with the layer): the split writes its float32 scores, B·heads·q·(P + L) of them,
    which made lesson 05's evaluation, whose BFCL prompts put about 500 tokens after the prefix, slower than
    SDPA's fused kernel (results/bench/bench_engine_prefill.json). A decoded token (q = 1) writes few scores, and there
    the split saves the copy.
    """
    prefix = _PREFIX.get()
    if prefix is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    if kwargs.get("sliding_window") is not None:
        raise NotImplementedError("the engine's shared-prefix attention has no sliding window; this model's "
                                  "layers use one (sample with RolloutConfig(engine='generate')).")
    prefix_keys, prefix_values = prefix[0][module.layer_idx], prefix[1][module.layer_idx]  # (kv_heads, P, D)
    rows, heads, q, dim = query.shape
    if q > 1:  # a chunk of several tokens (the prompts' prefill, a tool's reply): see the docstring
        keys = torch.cat([prefix_keys.expand(rows, -1, -1, -1), key], dim=2)
        values = torch.cat([prefix_values.expand(rows, -1, -1, -1), value], dim=2)
        if attention_mask is not None:
            attention_mask = torch.cat([attention_mask.new_zeros(*attention_mask.shape[:-1], prefix_keys.shape[1]),
                                        attention_mask], dim=-1)
        return sdpa_attention_forward(module, query, keys, values, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    kv_heads = key.shape[1]
    group = heads // kv_heads  # query heads per key-value head (grouped-query attention)
    scaling = dim ** -0.5 if scaling is None else scaling
    per_kv = query.reshape(rows, kv_heads, group * q, dim)  # query heads h = kv_head * group + g
    # the shared part: every row's queries against the one prefix, (kv_heads, B·group·q, P)
    shared = torch.bmm(per_kv.transpose(0, 1).reshape(kv_heads, rows * group * q, dim),
                       prefix_keys.transpose(1, 2)).float() * scaling  # the softmax in float32, as SDPA's kernels
    own = torch.matmul(per_kv, key.transpose(-1, -2)).float() * scaling  # (B, kv_heads, group·q, L)
    if attention_mask is not None:
        own = (own.view(rows, kv_heads, group, q, -1) + attention_mask[:, :, None]).view_as(own)
    shared = shared.view(kv_heads, rows, group * q, -1).transpose(0, 1)  # (B, kv_heads, group·q, P)
    top = torch.maximum(shared.amax(-1, keepdim=True), own.amax(-1, keepdim=True))
    shared, own = (shared - top).exp_(), (own - top).exp_()
    norm = shared.sum(-1, keepdim=True) + own.sum(-1, keepdim=True)
    shared, own = shared.to(value.dtype), own.to(value.dtype)
    out = torch.bmm(shared.transpose(0, 1).reshape(kv_heads, rows * group * q, -1), prefix_values)
    out = out.view(kv_heads, rows, group * q, dim).transpose(0, 1).float() + torch.matmul(own, value).float()
    out = (out / norm).to(query.dtype).reshape(rows, heads, q, dim)
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(PREFIX_ATTENTION, _prefix_attention)


@contextlib.contextmanager
def _shared_prefix(model: PreTrainedModel, prefix: tuple[torch.Tensor, torch.Tensor] | None) -> Iterator[None]:
    """Run `model` with `_prefix_attention` reading `prefix` (nothing changes when it is None)."""
    if prefix is None:
        yield
        return
    config, token = model.config, _PREFIX.set(prefix)
    previous = config._attn_implementation
    config._attn_implementation = PREFIX_ATTENTION
    try:
        yield
    finally:
        config._attn_implementation = previous
        _PREFIX.reset(token)


class _BufferLayer(DynamicLayer):
    """One layer's keys and values in a pre-allocated buffer: appending writes in place. Attention reads the
    first `span` columns (at least those written): the columns past the written ones are masked."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int, span: int = 0) -> None:
        super().__init__()
        self.keys, self.values = keys, values  # (batch, kv_heads, capacity, head_dim), views of the batch's buffer
        self.length, self.span = length, span
        self.dtype, self.device = keys.dtype, keys.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + key_states.shape[-2]
        self.keys[:, :, self.length:end] = key_states
        self.values[:, :, self.length:end] = value_states
        self.length = end
        span = max(end, self.span)
        return self.keys[:, :, :span], self.values[:, :, :span]

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return max(self.length + query_length, self.span), 0


@dataclass
class RowCache:
    """One episode's cache between turns: the keys and values of its first `length` tokens, no padding; the
    shared prefix's by reference (the same tensors for every episode that was prefilled with it)."""

    keys: torch.Tensor
    """(layers, kv_heads, own tokens, head_dim): the tokens after the prefix"""
    values: torch.Tensor
    """(layers, kv_heads, own tokens, head_dim)"""
    prefix: tuple[torch.Tensor, torch.Tensor] | None = None
    """the shared prefix's keys and values, each (layers, kv_heads, prefix tokens, head_dim), or None"""

    @property
    def prefix_length(self) -> int:
        return 0 if self.prefix is None else self.prefix[0].shape[2]

    @property
    def length(self) -> int:
        return self.prefix_length + self.keys.shape[2]

    def whole(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of all `length` tokens, the prefix copied in front."""
        if self.prefix is None:
            return self.keys, self.values
        return torch.cat([self.prefix[0], self.keys], dim=2), torch.cat([self.prefix[1], self.values], dim=2)


@dataclass
class TurnSample:
    """What one row sampled in one turn."""

    token_ids: list[int]
    logprobs: list[float]
    """log π_old(token | prefix) at the sampling temperature (at temperature 1 when sampling greedily)"""
    finished: bool
    """the turn ended with the end-of-turn token (included in token_ids); False when cut by the budget"""


class _Batch:
    """B rows decoding together: the shared prefix (once), the rows' buffers, which of their columns are real
    tokens, and each row's next position."""

    def __init__(self, model: PreTrainedModel, rows: int, capacity: int,
                 prefix: tuple[torch.Tensor, torch.Tensor] | None = None) -> None:
        config = model.config
        layers = config.num_hidden_layers
        kv_heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
        param = next(model.parameters())
        shape = (layers, rows, kv_heads, capacity, head_dim)
        self.keys = torch.zeros(shape, dtype=param.dtype, device=param.device)
        self.values = torch.zeros(shape, dtype=param.dtype, device=param.device)
        self.valid = torch.zeros(rows, capacity, dtype=torch.bool, device=param.device)
        self.positions = torch.zeros(rows, dtype=torch.long, device=param.device)  # next token's position
        self.length = 0  # columns written
        self.prefix = prefix  # (keys, values), each (layers, kv_heads, prefix tokens, head_dim), before every row

    def cache(self, span: int = 0) -> Cache:
        return Cache(layers=[_BufferLayer(self.keys[i], self.values[i], self.length, span)
                             for i in range(self.keys.shape[0])])

    def keep(self, rows: torch.Tensor) -> None:
        """Keep only `rows` (indices, any order, repeats allowed), in that order: new buffers."""
        self.keys, self.values = self.keys[:, rows], self.values[:, rows]
        self.valid, self.positions = self.valid[rows], self.positions[rows]

    def materialize_prefix(self) -> None:
        """Copy the shared prefix into every row's buffer (the layout without `_prefix_attention`)."""
        if self.prefix is None:
            return
        keys, values = self.prefix
        rows, shared = self.keys.shape[1], keys.shape[2]
        self.keys = torch.cat([keys[:, None].expand(-1, rows, -1, -1, -1), self.keys], dim=3)
        self.values = torch.cat([values[:, None].expand(-1, rows, -1, -1, -1), self.values], dim=3)
        self.valid = torch.cat([torch.ones(rows, shared, dtype=torch.bool, device=self.valid.device), self.valid], 1)
        self.length += shared
        self.prefix = None

    def compact(self, rows: list[int]) -> None:
        """Keep only `rows` (ascending indices), moved to the front of the same buffers. Decoding computes over the
        kept rows only, and the batch never holds a second copy of its cache (`keep` would build one beside the
        old buffers, nearly doubling the batch's memory at the moment finished rows leave)."""
        for to, row in enumerate(rows):  # ascending: a row is moved before its own slot is overwritten
            if to != row:
                self.keys[:, to].copy_(self.keys[:, row])
                self.values[:, to].copy_(self.values[:, row])
        index = torch.tensor(rows, device=self.valid.device)
        self.keys, self.values = self.keys[:, :len(rows)], self.values[:, :len(rows)]
        self.valid, self.positions = self.valid[index], self.positions[index]

    def row_cache(self, row: int) -> RowCache:
        columns = self.valid[row, :self.length].nonzero().squeeze(-1)
        return RowCache(self.keys[:, row].index_select(2, columns), self.values[:, row].index_select(2, columns),
                        self.prefix)


@torch.no_grad()
def _forward(model: PreTrainedModel, batch: _Batch, chunk: torch.Tensor, chunk_valid: torch.Tensor,
             chunk_positions: torch.Tensor) -> torch.Tensor:
    """Run a chunk of tokens, (B, W), at the next W columns of every row; return the last column's logits (B, V).

    chunk_valid: (B, W) bool, False on padding columns (never attended to, later tokens included).
    chunk_positions: (B, W) long, each token's position in its own sequence.
    The batch's shared prefix, if any, is visible to every token (`_prefix_attention`); the mask covers the rest.
    """
    start, width = batch.length, chunk.shape[1]
    # attention reads the written columns rounded up to a multiple of KEY_SPAN_STEP (the rest masked): see its note
    span = min(batch.valid.shape[1], -(-(start + width) // KEY_SPAN_STEP) * KEY_SPAN_STEP)
    batch.valid[:, start:start + width] = chunk_valid
    allowed = batch.valid[:, :span].unsqueeze(1).expand(-1, width, -1)  # (B, W, kv): real keys only
    causal = torch.ones(width, span, dtype=torch.bool, device=chunk.device).tril(start)
    allowed = allowed & causal  # and none from a later column
    dtype = next(model.parameters()).dtype
    mask = torch.zeros(allowed.shape, dtype=dtype, device=chunk.device).masked_fill_(~allowed, torch.finfo(dtype).min)
    # the last column's index as a tensor, not logits_to_keep=1: the slice `hidden[:, -1:]` of a multi-token chunk is
    # not contiguous, and PyTorch's bf16 CPU linear on it expands the vocabulary projection to every row first
    # (rows × 49k × 576 for SmolLM2: 1.7 GB and 1.5 s for 31 rows); an index gathers a contiguous copy
    last = torch.tensor([width - 1], device=chunk.device)
    with _shared_prefix(model, batch.prefix):
        out = model(input_ids=chunk, attention_mask=mask.unsqueeze(1), position_ids=chunk_positions,
                    past_key_values=batch.cache(span), use_cache=True, logits_to_keep=last)
    batch.length += width
    return out.logits[:, -1].float()


def _right_aligned(rows: list[list[int]], pad: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, W) token ids with each row right-aligned (its last token in the last column), and the (B, W) mask."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows], device=device)
    valid = torch.tensor([[False] * (width - len(r)) + [True] * len(r) for r in rows], device=device)
    return ids, valid


def _positions(valid: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """(B, W) position of each real token, counting from `first` (B,); 0 on padding."""
    return (first.unsqueeze(1) + valid.long().cumsum(1) - 1).clamp(min=0) * valid


def _common_prefix(rows: list[list[int]]) -> int:
    """Length of the longest prefix every row shares, leaving each row at least one token of its own."""
    limit = min(len(r) for r in rows) - 1
    n = 0
    while n < limit and all(r[n] == rows[0][n] for r in rows):
        n += 1
    return n


def _length_groups(lengths: list[int], budget: int | None = None) -> list[list[int]]:
    """Indices of `lengths` in groups of similar length (shortest first), each at most `budget` padded tokens
    (rows × longest; default PREFILL_TOKENS), or one row: prefilled together they attend over little padding."""
    budget = PREFILL_TOKENS if budget is None else budget
    groups: list[list[int]] = []
    for i in sorted(range(len(lengths)), key=lengths.__getitem__):
        if groups and (len(groups[-1]) + 1) * lengths[i] <= budget:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def _start_fresh(model: PreTrainedModel, prompts: list[list[int]], pad: int, room: int) -> tuple[_Batch, torch.Tensor]:
    """Prefill prompts without a cache: the shared prefix once (kept once), each distinct prompt once, then one row
    per prompt."""
    device = next(model.parameters()).device
    distinct = list(dict.fromkeys(tuple(p) for p in prompts))
    index = {p: i for i, p in enumerate(distinct)}
    unique = [list(p) for p in distinct]
    shared = _common_prefix(unique) if len(unique) > 1 else len(unique[0]) - 1
    shared = shared if shared >= PREFIX_MIN_TOKENS else 0
    suffixes = [p[shared:] for p in unique]
    width = max(len(s) for s in suffixes)
    prefix = None
    if shared:
        head = _Batch(model, 1, shared)
        ids = torch.tensor([unique[0][:shared]], device=device)
        _forward(model, head, ids, torch.ones_like(ids, dtype=torch.bool), torch.arange(shared, device=device)[None])
        prefix = (head.keys[:, 0], head.values[:, 0])  # (layers, kv_heads, shared, head_dim): kept once
    batch = _Batch(model, len(unique), width + room, prefix)
    logits = torch.empty(len(unique), model.config.vocab_size, device=device)
    for group in _length_groups([len(s) for s in suffixes]):  # prompts of similar length, so little padding
        ids, valid = _right_aligned([suffixes[i] for i in group], pad, device)
        sub = _Batch(model, len(group), ids.shape[1], prefix)
        first = torch.full((len(group),), shared, dtype=torch.long, device=device)
        rows = torch.tensor(group, device=device)
        logits[rows] = _forward(model, sub, ids, valid, _positions(valid, first))
        batch.keys[:, rows, :, width - ids.shape[1]:width] = sub.keys  # right-aligned
        batch.values[:, rows, :, width - ids.shape[1]:width] = sub.values
        batch.valid[rows, width - ids.shape[1]:width] = valid
        batch.positions[rows] = first + valid.sum(1)
    batch.length = width
    order = [index[tuple(p)] for p in prompts]
    if order != list(range(len(unique))):  # all distinct: already in order (a copy would double it for a moment)
        rows = torch.tensor(order, device=device)
        batch.keep(rows)  # a group's prompt run once, copied to each of its rows
        logits = logits[rows]
    if len(prompts) < SHARE_MIN_ROWS:
        batch.materialize_prefix()
    return batch, logits


def _continue(model: PreTrainedModel, caches: list[RowCache], pending: list[list[int]], pad: int, room: int
              ) -> tuple[_Batch, torch.Tensor]:
    """Rebuild a batch from each row's cache (right-aligned) and run the tokens appended since (`pending`). Rows
    that share one prefix keep it shared; rows prefilled in different batches get their prefix copied in."""
    device = next(model.parameters()).device
    prefix = caches[0].prefix
    if any(c.prefix is not prefix for c in caches):
        prefix = None
    own = [(c.keys, c.values) if prefix is not None else c.whole() for c in caches]
    cached = max(keys.shape[2] for keys, _ in own)
    width = max(len(p) for p in pending)
    batch = _Batch(model, len(caches), cached + width + room, prefix)
    for row, (keys, values) in enumerate(own):
        batch.keys[:, row, :, cached - keys.shape[2]:cached] = keys
        batch.values[:, row, :, cached - keys.shape[2]:cached] = values
        batch.valid[row, cached - keys.shape[2]:cached] = True
    del own
    batch.length = cached
    ids, valid = _right_aligned(pending, pad, device)
    first = torch.tensor([c.length for c in caches], dtype=torch.long, device=device)
    logits = _forward(model, batch, ids, valid, _positions(valid, first))
    batch.positions = first + valid.sum(1)
    return batch, logits


def sample_tokens(logits: torch.Tensor, temperature: float, top_p: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row from logits (B, V), and its log-probability under softmax(logits / temperature).

    temperature 0 is greedy (log-probability at temperature 1). top_p < 1 samples from the nucleus, but the
    recorded log-probability stays that of the full distribution, as the rollout records it.
    """
    if temperature <= 0:
        tokens = logits.argmax(-1)
        return tokens, torch.log_softmax(logits, -1).gather(-1, tokens[:, None]).squeeze(-1)
    scaled = logits / temperature
    logprobs = torch.log_softmax(scaled, -1)
    probs = logprobs.exp()
    if top_p < 1.0:
        sorted_probs, order = probs.sort(-1, descending=True)
        outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # tokens after the nucleus is complete
        probs = probs.scatter(-1, order, sorted_probs.masked_fill(outside, 0.0))
    # inverse-CDF sampling: one uniform per row, the first token whose cumulative probability reaches it. Exact,
    # and about 20 times cheaper on a CPU than torch.multinomial, which draws an exponential per vocabulary entry
    cdf = probs.cumsum(-1)
    uniform = torch.rand(cdf.shape[0], 1, device=cdf.device, dtype=cdf.dtype) * cdf[:, -1:]
    tokens = torch.searchsorted(cdf, uniform).clamp(max=cdf.shape[1] - 1).squeeze(-1)
    return tokens, logprobs.gather(-1, tokens[:, None]).squeeze(-1)


class Engine:
    """Samples model turns for episodes identified by a key, keeping each one's cache between its turns.

    `sample_turn(keys, sequences, ...)`: `sequences[i]` is episode `keys[i]`'s whole token sequence so far. The
    engine runs only what its cache of that episode lacks, so every sequence must extend the one it had at the
    episode's previous turn (tokens are appended, never changed). `release(key)` frees an episode that ended.
    """

    def __init__(self, model: PreTrainedModel, pad_token_id: int, end_of_turn_id: int) -> None:
        self.model, self.pad, self.eot = model, pad_token_id, end_of_turn_id
        self.caches: dict[int, RowCache] = {}

    def release(self, key: int) -> None:
        self.caches.pop(key, None)

    @torch.no_grad()
    def sample_turn(self, keys: list[int], sequences: list[list[int]], max_new_tokens: int,
                    temperature: float, top_p: float = 1.0, keep_caches: bool = True) -> list[TurnSample]:
        """One turn for every episode: up to `max_new_tokens` each, until its end-of-turn token.

        keep_caches: keep each finished episode's cache for its next turn; False in an episode's last allowed
        turn (every turn of a single-turn rollout), where copying the caches out would be wasted.
        """
        caches = [self.caches.get(k) for k in keys]
        if all(c is None for c in caches):
            batch, logits = _start_fresh(self.model, sequences, self.pad, max_new_tokens)
        elif all(c is not None for c in caches):
            pending = [s[c.length:] for s, c in zip(sequences, caches, strict=True)]
            if any(not p for p in pending):
                raise ValueError("sample_turn: a sequence has no token after its cached part; append before sampling.")
            batch, logits = _continue(self.model, caches, pending, self.pad, max_new_tokens)
            # the batch holds these caches now, and each row's is written anew when its turn ends (or dropped when
            # the budget cuts it): kept until then, the old copies would sit beside the batch for the whole turn
            for key in keys:
                self.caches.pop(key, None)
            del caches
        else:
            raise ValueError("sample_turn: mix of episodes with and without a cache; sample their turns separately.")
        samples = [TurnSample([], [], False) for _ in keys]
        rows = list(range(len(keys)))  # batch row → index into keys
        done = torch.zeros(len(keys), dtype=torch.bool, device=logits.device)
        for step in range(max_new_tokens):
            tokens, logprobs = sample_tokens(logits, temperature, top_p)
            for r, (i, token, logprob) in enumerate(zip(rows, tokens.tolist(), logprobs.tolist(), strict=True)):
                if done[r]:
                    continue
                samples[i].token_ids.append(token)
                samples[i].logprobs.append(logprob)
                if token == self.eot:
                    samples[i].finished = True
                    done[r] = True
                    if keep_caches:
                        self.caches[keys[i]] = batch.row_cache(r)  # everything but the end-of-turn token
            if done.all() or step == max_new_tokens - 1:
                break
            if done.sum() >= max(1, COMPACT_SHARE * len(rows)):  # drop finished rows from the batch
                keep = (~done).nonzero().squeeze(-1)
                batch.compact(keep.tolist())
                rows = [rows[r] for r in keep.tolist()]
                tokens, done = tokens[keep], done[keep]
            step_valid = ~done[:, None]  # a finished row still in the batch writes a column no one attends to
            logits = _forward(self.model, batch, tokens[:, None], step_valid, batch.positions[:, None])
            batch.positions = batch.positions + step_valid.squeeze(1).long()
        for i, sample in enumerate(samples):
            if not sample.finished:
                self.release(keys[i])  # cut by the budget: the episode ends here
        return samples
