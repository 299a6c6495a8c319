"""Scoring only the needed positions, and running a shared prefix once, give the same log-probabilities (and
gradients) as a full forward pass."""

import pytest
import torch

from agentrl_lite.logprobs import shared_prefix_length, token_logprobs
from agentrl_lite.models import tiny_policy


def test_matches_full_forward_on_the_masked_positions_only():
    model, _ = tiny_policy(seed=3)
    gen = torch.Generator().manual_seed(0)
    input_ids = torch.randint(5, 500, (3, 12), generator=gen)
    attention = torch.ones_like(input_ids)
    attention[2, 9:] = 0  # right padding on the last row
    mask = torch.zeros_like(input_ids)
    mask[0, 4:8] = 1
    mask[1, 10:] = 1
    mask[2, 5:9] = 1
    with torch.no_grad():
        got = token_logprobs(model, input_ids, attention, mask, temperature=0.7)
        full = torch.log_softmax(model(input_ids=input_ids, attention_mask=attention).logits[:, :-1] / 0.7, -1)
    expected = torch.zeros(3, 12)
    expected[:, 1:] = full.gather(-1, input_ids[:, 1:, None]).squeeze(-1) * mask[:, 1:]
    assert torch.allclose(got, expected, atol=1e-5)
    assert (got[mask == 0] == 0).all() and (got[mask == 1] < 0).all()


def test_entropy_at_scored_positions():
    model, _ = tiny_policy(seed=4)
    input_ids = torch.randint(5, 500, (2, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.zeros_like(input_ids)
    mask[:, 5:] = 1
    with torch.no_grad():
        _, entropy = token_logprobs(model, input_ids, torch.ones_like(input_ids), mask, return_entropy=True)
        logits = model(input_ids=input_ids).logits[:, :-1]
    expected = torch.distributions.Categorical(logits=logits).entropy()[:, 4:]
    assert torch.allclose(entropy[:, 5:], expected, atol=1e-4) and (entropy[:, :5] == 0).all()


@pytest.mark.parametrize("first_scored", [40, 43])
def test_the_shared_prefix_pass_equals_running_every_row_whole(first_scored):
    """Rows that start with the same 40 tokens (a GRPO batch's prompt): the prefix runs once, its cache is repeated
    to every row, and values, entropies and gradients equal the plain pass within float precision."""
    model, tokenizer = tiny_policy(seed=0, init_std=0.5)
    generator = torch.Generator().manual_seed(0)
    prefix = torch.randint(5, 200, (40,), generator=generator)
    rows = [torch.cat([prefix, torch.randint(5, 200, (n,), generator=generator)]) for n in (10, 25, 7, 30, 12)]
    width = max(len(r) for r in rows)
    ids = torch.stack([torch.cat([r, torch.full((width - len(r),), tokenizer.pad_token_id)]) for r in rows])
    attention = torch.stack([(torch.arange(width) < len(r)).long() for r in rows])
    score = attention.clone()
    score[:, :first_scored] = 0
    assert shared_prefix_length(ids, attention, first_scored) == 40
    results = {}
    for share in (False, True):
        model.zero_grad()
        values, entropy = token_logprobs(model, ids, attention, score, 0.9, return_entropy=True, share_prefix=share)
        values.sum().backward()
        results[share] = values.detach(), entropy, {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.testing.assert_close(results[True][0], results[False][0], atol=5e-5, rtol=0)
    torch.testing.assert_close(results[True][1], results[False][1], atol=5e-5, rtol=0)
    for name, grad in results[False][2].items():
        assert (results[True][2][name] - grad).norm() <= 1e-4 * grad.norm() + 1e-6, name


@pytest.mark.parametrize("share", [False, True])
def test_checkpointed_layers_give_the_same_values_and_gradients_and_keep_fewer_activations(share):
    """checkpoint=True recomputes each layer in the backward pass: the same log-probabilities and gradients as the
    plain pass (with the shared prefix run once, through a read-only copy of its cache, too), fewer tensors kept
    for the backward pass, and the layers are themselves again afterwards."""
    from agentrl_lite.logprobs import decoder_layers

    model, tokenizer = tiny_policy(seed=0, init_std=0.5)
    model.train()
    generator = torch.Generator().manual_seed(1)
    prefix = torch.randint(5, 200, (40,), generator=generator)
    rows = [torch.cat([prefix, torch.randint(5, 200, (n,), generator=generator)]) for n in (10, 25, 7, 30)]
    width = max(len(r) for r in rows)
    ids = torch.stack([torch.cat([r, torch.full((width - len(r),), tokenizer.pad_token_id)]) for r in rows])
    attention = torch.stack([(torch.arange(width) < len(r)).long() for r in rows])
    score = attention.clone()
    score[:, :42] = 0
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    results, kept = {}, {}
    for checkpoint in (False, True):
        model.zero_grad()
        saved = []  # activations kept for the backward pass (the weights it keeps are there anyway)

        def pack(t, saved=saved):  # the vocabulary-sized ones are the scored positions' logits, kept either way
            kept_anyway = t.untyped_storage().data_ptr() in weights or t.shape[-1:] == (model.config.vocab_size,)
            saved.append(0 if kept_anyway else t.numel())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            values = token_logprobs(model, ids, attention, score, share_prefix=share, checkpoint=checkpoint)
        kept[checkpoint] = sum(saved)
        values.sum().backward()
        results[checkpoint] = values.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.testing.assert_close(results[True][0], results[False][0], atol=1e-5, rtol=0)
    for name, grad in results[False][1].items():
        assert (results[True][1][name] - grad).norm() <= 1e-5 * grad.norm() + 1e-7, name
    assert kept[True] < 0.5 * kept[False], kept
    assert all("forward" not in vars(layer) for layer in decoder_layers(model)), "the wrappers must be removed"


@pytest.mark.parametrize("checkpoint", [False, True])
def test_the_rows_gradient_reaches_every_weight_before_the_prefix_pass_backward(checkpoint):
    """Every decoder weight serves the prefix pass and the rows' pass. In one autograd graph the rows' gradient of
    every weight would wait in a buffer the size of all gradients until the prefix pass's backward; the rows' pass
    runs its own backward instead (`_RowsPass`), so each weight's `.grad` is written twice, the rows' share first,
    and no weight's gradient is complete before the prefix pass's backward has begun. Without `rows_backward_first`
    the pass is one graph, so that `torch.autograd.grad` sees every gradient (lesson 04 takes one by hand)."""
    model, tokenizer = tiny_policy(seed=0, init_std=0.5)
    model.train()
    generator = torch.Generator().manual_seed(2)
    prefix = torch.randint(5, 200, (40,), generator=generator)
    rows = [torch.cat([prefix, torch.randint(5, 200, (n,), generator=generator)]) for n in (10, 25, 7)]
    width = max(len(r) for r in rows)
    ids = torch.stack([torch.cat([r, torch.full((width - len(r),), tokenizer.pad_token_id)]) for r in rows])
    attention = torch.stack([(torch.arange(width) < len(r)).long() for r in rows])
    score = attention.clone()
    score[:, :42] = 0
    layers = [p for n, p in model.named_parameters() if ".layers." in n]
    first = [id(p) for n, p in model.named_parameters() if ".layers.0." in n]  # all serve both passes
    written = {id(p): 0 for p in layers}
    handles = [p.register_post_accumulate_grad_hook(lambda p: written.__setitem__(id(p), written[id(p)] + 1))
               for p in layers]
    values = token_logprobs(model, ids, attention, score, checkpoint=checkpoint, rows_backward_first=True)
    values.sum().backward()
    for handle in handles:
        handle.remove()
    assert all(written[i] == 2 for i in first), [written[i] for i in first]
    # the last layer's query, output and MLP weights act on the prefix's last hidden state, which no scored
    # token reads here: they get only the rows' gradient
    assert set(written.values()) == {1, 2}
    # without it, one graph: torch.autograd.grad sees every weight's whole gradient
    values = token_logprobs(model, ids, attention, score, checkpoint=checkpoint)
    grads = torch.autograd.grad(values.sum(), layers, allow_unused=True)
    assert all(g is not None for g in grads)
