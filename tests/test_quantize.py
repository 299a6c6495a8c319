"""The packed sampling copies (`agentrl_lite.quantize`: fp16 weights, int8): the arithmetic of one layer, the copy of a whole policy,
its refresh after an update (the GRPO trainer sampling with it: tests/test_grpo.py)."""

from __future__ import annotations

import pytest
import torch

from agentrl_lite.models import (
    park_sampling_copy,
    refresh_sampling_copy,
    sampling_copy,
    tiny_policy,
)
from agentrl_lite.quantize import PackedLinear


def stored_weights(module):
    """every PackedLinear's weight as stored (unpacked from fbgemm's layout, in fp32), by layer name"""
    return {name: m.stored_weight() for name, m in module.named_modules() if isinstance(m, PackedLinear)}


def test_an_int8_layer_stores_its_rounded_weight_and_computes_with_it():
    """Each row is stored as integers times one scale, max |w| / 127: every weight moves by at most half a step
    and the largest of a row is exact; the layer computes x Wqᵀ + b up to the rounding of x (7-bit, per call)."""
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=True)
    layer = PackedLinear(linear, "int8")
    w = linear.weight.detach()
    scale = w.abs().amax(dim=1) / 127  # scratch: the per-row scale and the rounding
    rounded = torch.round(w / scale[:, None]) * scale[:, None]
    _, bias = torch.ops.quantized.linear_unpack(layer.packed)
    assert torch.allclose(layer.stored_weight(), rounded, atol=1e-6) and torch.equal(bias, linear.bias.detach())
    assert ((rounded - w).abs() <= scale[:, None] / 2 + 1e-6).all()
    x = torch.randn(3, 5, 64)
    exact = x @ rounded.T + linear.bias.detach()
    out = layer(x)
    assert out.shape == (3, 5, 48)
    assert (out - exact).abs().max() < 0.05 * exact.abs().max()  # x's 7-bit rounding: a few percent at most
    assert not torch.allclose(out, linear(x), atol=1e-4), "int8 rounding must show in the output"


@pytest.mark.parametrize("dtype", ["fp16_weights", "int8"])
def test_a_packed_copy_replaces_every_linear_layer_and_leaves_the_policy_alone(dtype):
    model, _ = tiny_policy(seed=0)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    sampler = sampling_copy(model, dtype)
    assert not any(isinstance(m, torch.nn.Linear) for m in sampler.modules())
    assert sum(isinstance(m, PackedLinear) for m in sampler.modules()) == sum(
        isinstance(m, torch.nn.Linear) for m in model.modules())
    assert not sampler.training and not any(p.requires_grad for p in sampler.parameters())
    # the policy: unchanged, fp32, trainable; its embeddings copied (the sampler's, not shared), the output layer
    # quantised from the tied weight
    for name, p in model.named_parameters():
        assert p.requires_grad and p.dtype == torch.float32 and torch.equal(p, before[name]), name
    embed = sampler.get_input_embeddings().weight
    assert torch.equal(embed, model.get_input_embeddings().weight)
    assert embed.data_ptr() != model.get_input_embeddings().weight.data_ptr()
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        mine, theirs = sampler(input_ids=ids).logits, model(input_ids=ids).logits
    assert mine.shape == theirs.shape and not torch.equal(mine, theirs)
    bound = {"fp16_weights": 1e-3, "int8": 0.05}[dtype]  # fp16 keeps 11 significant bits; int8 rounds x too
    assert (mine - theirs).abs().max() < bound * theirs.abs().max()


@pytest.mark.parametrize("dtype", ["fp16_weights", "int8"])
def test_parking_frees_the_packed_weights_and_a_refresh_follows_the_policy(dtype):
    model, _ = tiny_policy(seed=0)
    sampler = sampling_copy(model, dtype)
    with torch.no_grad():  # an update: every weight moves
        for p in model.parameters():
            p.add_(0.01 * torch.randn_like(p))
    park_sampling_copy(sampler)
    assert all(m.parked for m in sampler.modules() if isinstance(m, PackedLinear))
    assert all(p.numel() == 0 for p in sampler.parameters())
    refresh_sampling_copy(sampler, model, only_parked=True)
    fresh = sampling_copy(model, dtype)
    for (name, mine), theirs in zip(stored_weights(sampler).items(), stored_weights(fresh).values(), strict=True):
        assert torch.equal(mine, theirs), name
    for (name, mine), theirs in zip(sampler.state_dict().items(), fresh.state_dict().values(), strict=True):
        assert torch.equal(mine, theirs), name  # the fp32 rest: embeddings and norms


def test_an_fp16_layer_computes_with_its_weight_in_half_precision():
    torch.manual_seed(0)
    linear = torch.nn.Linear(64, 48, bias=True)
    layer = PackedLinear(linear, "fp16")
    half = linear.weight.detach().half().float()  # scratch: the weight rounded to fp16
    assert torch.equal(layer.stored_weight(), half)
    x = torch.randn(7, 64)
    assert torch.allclose(layer(x), x @ half.T + linear.bias.detach(), atol=1e-5)
    with pytest.raises(ValueError, match="kind"):
        PackedLinear(linear, "int4")
