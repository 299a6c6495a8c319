"""The sampling engine: greedy decoding writes what `model.generate` writes, sampled log-probabilities equal a
fresh forward pass, and hostile episodes (a malformed call, an empty tool result, a turn cut by the budget)
end exactly as they do with `generate`."""

from __future__ import annotations

import pytest
import torch

from agentrl_lite.chat import end_of_turn_id
from agentrl_lite.engine import Engine, sample_tokens
from agentrl_lite.models import tiny_policy
from agentrl_lite.rollout import RolloutConfig, rollout
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tools import Toolbox


def lookup(key: str) -> str:
    """Look a key up in an empty table.

    Args:
        key: the key to look up
    """
    return ""


SYSTEM = {"role": "system", "content": "You are a careful assistant. Use the tools."}
MALFORMED = '<tool_call>\n{"name": "lookup", "arguments": {"key": "x"}\n</tool_call>'  # one brace short
CALL = '<tool_call>\n{"name": "lookup", "arguments": {"key": "x"}}\n</tool_call>'


@pytest.fixture(scope="module")
def scripted():
    """A tiny model fine-tuned until it greedily replays: a malformed call, a good call (empty result), an answer."""
    model, tokenizer = tiny_policy(seed=0)
    toolbox = Toolbox([lookup])
    (_, errors) = toolbox.run(MALFORMED)
    conversation = [SYSTEM, {"role": "user", "content": "Find x."},
                    {"role": "assistant", "content": MALFORMED}, {"role": "tool", "content": errors[0]},
                    {"role": "assistant", "content": CALL}, {"role": "tool", "content": ""},
                    {"role": "assistant", "content": "<answer>none</answer>"}]
    losses = sft(model, tokenizer, [conversation], toolbox.schemas, SFTConfig(steps=120, batch_size=1, lr=3e-3,
                                                                               progress=False))
    assert losses[-1] < 0.05 * losses[0], "the tiny model did not memorise the script"
    return model, tokenizer


def run(model, tokenizer, prompts, engine, **config):
    settings = dict(max_turns=3, max_new_tokens=48, temperature=0.0, progress=False, engine=engine)
    return rollout(model, tokenizer, prompts, lambda: Toolbox([lookup]), RolloutConfig(**{**settings, **config}))


def assert_same_episodes(a, b):
    for x, y in zip(a, b, strict=True):
        assert x.token_ids == y.token_ids
        assert x.model_mask == y.model_mask and x.stop_reason == y.stop_reason
        assert [t.tool_results for t in x.turns] == [t.tool_results for t in y.turns]
        torch.testing.assert_close(torch.tensor(x.logprobs), torch.tensor(y.logprobs), atol=1e-4, rtol=0)


@pytest.mark.slow
def test_the_hostile_script_replays_identically_with_both_engines(scripted):
    model, tokenizer = scripted
    prompts = [[SYSTEM, {"role": "user", "content": "Find x."}]] * 2
    ours, reference = run(model, tokenizer, prompts, "kv_cache"), run(model, tokenizer, prompts, "generate")
    assert_same_episodes(ours, reference)
    episode = ours[0]
    tool_results = [t.tool_results for t in episode.turns if t.role == "tool"]
    assert tool_results[0][0].startswith("Error:") and tool_results[1] == [""]  # parse error, then an empty result
    assert episode.stop_reason == "answer" and episode.answer == "none" and len(episode.model_turns) == 3


@pytest.mark.parametrize("budget, reason", [(12, "max_tokens"), (48, "max_turns")])
def test_budgets_end_the_script_with_the_same_reason(scripted, budget, reason):
    model, tokenizer = scripted
    prompts = [[SYSTEM, {"role": "user", "content": "Find x."}]]
    turns = 3 if budget == 12 else 2  # 12 tokens cut the first call mid-turn; 2 turns end on the second call
    ours = run(model, tokenizer, prompts, "kv_cache", max_new_tokens=budget, max_turns=turns)
    assert_same_episodes(ours, run(model, tokenizer, prompts, "generate", max_new_tokens=budget, max_turns=turns))
    assert ours[0].stop_reason == reason


def test_greedy_equals_generate_on_distinct_and_repeated_prompts():
    model, tokenizer = tiny_policy(seed=3, init_std=0.5)
    questions = ["What is 2 + 2?", "Name a colour.", "What is 17 * 23?", "Say hi."]
    prompts = [[SYSTEM, {"role": "user", "content": q}] for q in questions for _ in range(2)]  # groups of two
    ours = run(model, tokenizer, prompts, "kv_cache", max_new_tokens=16, max_turns=2)
    assert_same_episodes(ours, run(model, tokenizer, prompts, "generate", max_new_tokens=16, max_turns=2))


def fresh_logprobs(model, token_ids, temperature):
    ids = torch.tensor([token_ids])
    logits = model(input_ids=ids).logits[0, :-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, ids[0, 1:, None]).squeeze(-1)


def test_sampled_logprobs_equal_a_fresh_forward_with_a_shared_prefix_and_groups():
    model, tokenizer = tiny_policy(seed=4, init_std=0.5)
    torch.manual_seed(0)
    prompts = [[SYSTEM, {"role": "user", "content": q}] for q in ("a", "bb b", "c c c c c") for _ in range(3)]
    episodes = run(model, tokenizer, prompts, "kv_cache", temperature=0.8, max_new_tokens=20, batch_size=4)
    with torch.no_grad():
        for ep in episodes:
            mask = torch.tensor(ep.model_mask[1:], dtype=torch.bool)
            fresh = fresh_logprobs(model, ep.token_ids, 0.8)
            torch.testing.assert_close(torch.tensor(ep.logprobs[1:])[mask], fresh[mask], atol=1e-4, rtol=0)


def test_decoding_reads_the_keys_in_spans_of_a_few_widths(monkeypatch):
    """A decoded token widens its row by one column, but attention reads the keys in spans that grow by
    KEY_SPAN_STEP columns (the ones not yet written masked): oneDNN caches a bf16 kernel per matrix shape, and a
    new width per token filled that cache with gigabytes. The exactness tests above decode through these spans."""
    import agentrl_lite.engine as engine_module

    model, tokenizer = tiny_policy(seed=4, init_std=0.5)
    seen, update = [], engine_module._BufferLayer.update

    def recording(self, key_states, value_states, *args, **kwargs):  # every layer: the same widths each
        keys, values = update(self, key_states, value_states, *args, **kwargs)
        seen.append((key_states.shape[-2], keys.shape[-2], self.keys.shape[-2]))
        return keys, values

    monkeypatch.setattr(engine_module._BufferLayer, "update", recording)
    torch.manual_seed(0)
    prompts = [[SYSTEM, {"role": "user", "content": q}] for q in ("a", "bb b", "c c c c c")]
    run(model, tokenizer, prompts, "kv_cache", temperature=1.0, max_new_tokens=150, max_turns=1)
    decoding = [(span, capacity) for new, span, capacity in seen if new == 1]
    assert len(decoding) > 100 * model.config.num_hidden_layers, "the tiny model should decode most of its budget"
    assert all(span % engine_module.KEY_SPAN_STEP == 0 or span == capacity for span, capacity in decoding), decoding
    assert len({span for span, _ in decoding}) <= 150 // engine_module.KEY_SPAN_STEP + 2


@pytest.mark.parametrize("budget", [1, 40])
def test_prompts_of_different_lengths_prefilled_in_groups_stay_exact(monkeypatch, budget):
    """With a small prefill budget the distinct prompts are run in several length groups (one row each at
    budget 1; with padding inside a group at 40) and copied into the batch right-aligned: greedy tokens and
    log-probs must not change. No system prompt, so the prompts are short and a padding column wrongly attended
    to moves the log-probs (checked by breaking the copy)."""
    import agentrl_lite.engine as engine_module

    model, tokenizer = tiny_policy(seed=5, init_std=0.5)
    questions = ["a", "What is 17 * 23, and why?", "b c", "Name three colours of the rainbow in order, please."]
    prompts = [[{"role": "user", "content": q}] for q in questions for _ in range(2)]

    def greedy(engine):
        config = RolloutConfig(max_turns=1, max_new_tokens=12, temperature=0.0, progress=False, engine=engine)
        return rollout(model, tokenizer, prompts, None, config)

    reference = greedy("generate")
    monkeypatch.setattr(engine_module, "PREFILL_TOKENS", budget)
    groups = engine_module._length_groups([3, 30, 5, 40])
    assert sorted(i for g in groups for i in g) == [0, 1, 2, 3] and len(groups) > 1
    ours = greedy("kv_cache")
    assert_same_episodes(ours, reference)
    with torch.no_grad():
        for ep in ours:
            mask = torch.tensor(ep.model_mask[1:], dtype=torch.bool)
            torch.testing.assert_close(torch.tensor(ep.logprobs[1:])[mask], fresh_logprobs(model, ep.token_ids, 1.0)[mask],
                                       atol=1e-4, rtol=0)


def test_the_engine_frees_what_it_no_longer_needs_and_refuses_a_mixed_batch():
    model, tokenizer = tiny_policy(seed=5)
    engine = Engine(model, tokenizer.pad_token_id, end_of_turn_id(tokenizer))
    prompt = tokenizer("<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"]
    samples = engine.sample_turn([0, 1], [prompt, prompt], max_new_tokens=4, temperature=1.0)
    cut = [k for k, s in zip([0, 1], samples, strict=True) if not s.finished]
    assert all(k not in engine.caches for k in cut)  # an episode cut by the budget ends: no cache kept
    engine.sample_turn([2, 3], [prompt, prompt], max_new_tokens=4, temperature=1.0, keep_caches=False)
    assert 2 not in engine.caches and 3 not in engine.caches  # a last allowed turn keeps nothing
    engine.caches[0] = _dummy(engine, prompt)  # episode 0 has had a turn, episode 7 has not
    with pytest.raises(ValueError, match="mix of episodes"):
        engine.sample_turn([0, 7], [prompt + [1], prompt], max_new_tokens=2, temperature=1.0)
    engine.release(0)
    assert 0 not in engine.caches


def _dummy(engine, prompt):
    """A cache for `prompt` without its last token, as a finished turn leaves one."""
    from agentrl_lite.engine import _start_fresh

    batch, _ = _start_fresh(engine.model, [prompt], engine.pad, 1)
    return batch.row_cache(0)


def test_sample_tokens_records_the_full_distributions_logprob():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]] * 3)
    tokens, logprobs = sample_tokens(logits, 0.0)
    assert tokens.tolist() == [0, 0, 0]
    torch.testing.assert_close(logprobs, torch.log_softmax(logits, -1)[:, 0])
    torch.manual_seed(0)
    tokens, logprobs = sample_tokens(logits, 0.5, top_p=0.5)  # the nucleus is the top token alone
    assert tokens.tolist() == [0, 0, 0]
    torch.testing.assert_close(logprobs, torch.log_softmax(logits / 0.5, -1)[:, 0])


def test_inverse_cdf_sampling_follows_the_softmax():
    """200 000 draws from a 5-token distribution: every frequency within 0.005 of its probability (the
    standard error is at most 0.0011, so a wrong sampler fails and a right one passes with certainty here)."""
    torch.manual_seed(0)
    logits = torch.tensor([[0.0, 1.0, 2.0, -1.0, 0.5]]).expand(200_000, -1).contiguous()
    tokens, logprobs = sample_tokens(logits, 0.7)
    frequencies = torch.bincount(tokens, minlength=5).float() / len(tokens)
    probabilities = torch.softmax(logits[0] / 0.7, -1)
    assert (frequencies - probabilities).abs().max() < 0.005, (frequencies, probabilities)
    torch.testing.assert_close(logprobs, probabilities.log()[tokens])


@pytest.mark.parametrize("q", [1, 4], ids=["one token: split softmax", "a chunk: concatenated"])
def test_prefix_attention_equals_sdpa_over_the_prefix_and_the_rows_keys_together(q: int):
    """`_prefix_attention` (the prefix stored once) gives SDPA's output over prefix + row keys concatenated, with
    grouped-query heads and masked (padding, causal) row columns: for one decoded token (the softmax split in its
    shared and own parts) and for a chunk of several (the prefix concatenated in front of each row's keys)."""
    from types import SimpleNamespace

    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    from agentrl_lite.engine import _PREFIX, _prefix_attention

    torch.manual_seed(0)
    rows, heads, kv_heads, dim, prefix_len, own_len, layers = 3, 6, 2, 8, 5, 7, 2
    query = torch.randn(rows, heads, q, dim)
    keys, values = torch.randn(rows, kv_heads, own_len, dim), torch.randn(rows, kv_heads, own_len, dim)
    prefix = (torch.randn(layers, kv_heads, prefix_len, dim), torch.randn(layers, kv_heads, prefix_len, dim))
    allowed = torch.rand(rows, 1, q, own_len) > 0.4
    allowed[..., -1] = True  # every query sees at least one of its own columns
    mask = torch.zeros(allowed.shape).masked_fill_(~allowed, torch.finfo(torch.float32).min)
    module = SimpleNamespace(layer_idx=1, num_key_value_groups=heads // kv_heads, is_causal=False, training=False)
    token = _PREFIX.set(prefix)
    try:
        ours, _ = _prefix_attention(module, query, keys, values, mask, scaling=dim ** -0.5)
    finally:
        _PREFIX.reset(token)
    whole_keys = torch.cat([prefix[0][1].expand(rows, -1, -1, -1), keys], dim=2)
    whole_values = torch.cat([prefix[1][1].expand(rows, -1, -1, -1), values], dim=2)
    whole_mask = torch.cat([torch.zeros(rows, 1, q, prefix_len), mask], dim=-1)
    reference, _ = sdpa_attention_forward(module, query, whole_keys, whole_values, whole_mask, scaling=dim ** -0.5)
    torch.testing.assert_close(ours, reference, atol=1e-5, rtol=1e-5)


def test_the_shared_prefix_is_kept_once_and_rows_from_different_batches_continue_exactly(monkeypatch):
    """Every row of a batch refers to one prefix (no copy per row). A turn that continues rows prefilled in two
    batches (two prefixes) copies them in and stays exact: its log-probs equal a fresh forward pass. (Batches
    under SHARE_MIN_ROWS rows copy the prefix into each row; lowered here so that two-row batches share it.)"""
    import agentrl_lite.engine as engine_module
    from agentrl_lite.engine import _start_fresh

    monkeypatch.setattr(engine_module, "SHARE_MIN_ROWS", 1)
    model, tokenizer = tiny_policy(seed=4, init_std=0.5)
    engine = Engine(model, tokenizer.pad_token_id, end_of_turn_id(tokenizer))
    system = {"role": "system", "content": "You are a careful assistant. Use the tools and answer briefly. " * 3}
    prompts = [tokenizer.apply_chat_template([system, {"role": "user", "content": q}], add_generation_prompt=True,
                                             tokenize=True)["input_ids"] for q in ("a", "bb b", "c c c", "dddd")]
    first, _ = _start_fresh(model, prompts[:2], engine.pad, 1)
    second, _ = _start_fresh(model, prompts[2:], engine.pad, 1)
    caches = [first.row_cache(0), first.row_cache(1), second.row_cache(0), second.row_cache(1)]
    assert caches[0].prefix is caches[1].prefix and caches[0].prefix is not caches[2].prefix
    assert caches[0].prefix_length > 20 and caches[0].keys.shape[2] == len(prompts[0]) - caches[0].prefix_length
    assert [c.length for c in caches] == [len(p) for p in prompts]
    engine.caches = dict(enumerate(caches))
    sequences = [p + [17, 18, 19][:i + 1] for i, p in enumerate(prompts)]  # tokens appended since, of different lengths
    torch.manual_seed(0)
    samples = engine.sample_turn([0, 1, 2, 3], sequences, 5, temperature=0.7)
    with torch.no_grad():
        for seq, sample in zip(sequences, samples, strict=True):
            fresh = fresh_logprobs(model, seq + sample.token_ids, 0.7)[len(seq) - 1:]
            torch.testing.assert_close(torch.tensor(sample.logprobs), fresh, atol=1e-4, rtol=0)
