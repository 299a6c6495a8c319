"""Scoring only the needed positions gives the same log-probabilities as a full forward pass."""

import torch

from agentrl_lite.logprobs import token_logprobs
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
