"""Packed linear layers for a policy's sampling copy on CPUs without fast bf16: fp16 weights, or int8.

Decoding a small batch reads every weight once per token, so its speed is the speed of reading the weights.
Where bf16 runs natively a bf16 copy halves the bytes (`models.fast_sampler_dtype`); where it is emulated, bf16 is
slower than fp32, and PyTorch's fbgemm kernels are the way to fewer bytes on an x86 CPU:

- "fp16": each weight stored in half precision, packed for fbgemm, multiplied with fp32 activations
  (`torch.ops.quantized.linear_dynamic_fp16`). Half the bytes, and fp16 keeps 11 significant bits (bf16: 8): the
  copy's log-probs stay closer to the policy's than a bf16 copy's. The sampler "auto" picks it where bf16 is slow.
- "int8": each weight row as integers in [-127, 127] times one scale, and the activations quantised too, per call
  and per tensor (`torch.ops.quantized.linear_dynamic`). A quarter of the bytes and the fastest, but rounding the
  activations moves the log-probs far from the policy's (`benchmarks/sampler_copies.py` records the gap and the
  importance weights): too coarse to sample for RL with a model this small; there for comparison.

The GRPO trainer corrects for either copy as it does for bf16 (truncated importance sampling,
`GRPOConfig.is_cap`). torchao, the maintained home of quantisation, ran these products slower than fp32 on a CPU
without `torch.compile`, hence the fbgemm operators that ship with PyTorch.
"""

from __future__ import annotations

import copy
import warnings

import torch

KINDS = ("fp16", "int8")
REDUCE_RANGE = True
"""int8: activations quantised to 7 bits, not 8: fbgemm's int8 product can overflow on x86 CPUs without VNNI (most
of the laptops this path is for), and the 7-bit range cannot"""


def fbgemm_available() -> bool:
    """Whether PyTorch has its fbgemm kernels here (x86 CPUs with AVX2; not ARM)."""
    return "fbgemm" in torch.backends.quantized.supported_engines


class PackedLinear(torch.nn.Module):
    """A frozen linear layer computing x Wᵀ + b from a packed copy of W: fp16, or int8 with one scale per row
    (scale = max |w| / 127). Holds fbgemm's packed weight (`packed`), not a parameter; `pack_` writes it."""

    def __init__(self, linear: torch.nn.Linear, kind: str) -> None:
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind={kind!r}: use one of {KINDS}")
        self.kind, self.in_features, self.out_features = kind, linear.in_features, linear.out_features
        self.packed = None
        self.pack_(linear)

    @torch.no_grad()
    def pack_(self, linear: torch.nn.Linear) -> None:
        """Store `linear`'s weight (rounded to fp16, or each row to the nearest multiple of its int8 scale)."""
        weight = linear.weight.detach().float()
        bias = None if linear.bias is None else linear.bias.detach().float()
        if self.kind == "fp16":
            self.packed = torch.ops.quantized.linear_prepack_fp16(weight, bias)
            return
        scale = (weight.abs().amax(dim=1).clamp(min=1e-12) / 127.0).double()
        zero = torch.zeros(self.out_features, dtype=torch.int64)
        with warnings.catch_warnings():  # PyTorch plans to move its quantised tensors to torchao: see the module
            warnings.filterwarnings("ignore", message=".*quantized tensor creation functions.*")
            q = torch.quantize_per_channel(weight, scale, zero, 0, torch.qint8)
        self.packed = torch.ops.quantized.linear_prepack(q, bias)

    def free_(self) -> None:
        """Drop the weight (the trainer parks its sampler during the update); `pack_` writes it again."""
        self.packed = None

    @property
    def parked(self) -> bool:
        return self.packed is None

    def stored_weight(self) -> torch.Tensor:
        """The weight as stored, in fp32: (out_features, in_features)."""
        if self.kind == "fp16":
            return torch.ops.quantized.linear_unpack_fp16(self.packed)[0].float()
        return torch.ops.quantized.linear_unpack(self.packed)[0].dequantize()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.float().contiguous()
        if self.kind == "fp16":
            return torch.ops.quantized.linear_dynamic_fp16(x, self.packed)
        return torch.ops.quantized.linear_dynamic(x, self.packed, REDUCE_RANGE)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, kind={self.kind}"


def packed_copy(model: torch.nn.Module, kind: str) -> torch.nn.Module:
    """A frozen copy of `model` whose `nn.Linear` layers are `PackedLinear` of `kind` (the output layer included,
    untied from the input embeddings, which stay fp32 like the norms). The linear weights are never copied in fp32.
    """
    if not fbgemm_available():
        raise RuntimeError(f"a {kind} sampling copy needs PyTorch's fbgemm kernels (x86 CPUs with AVX2), not found "
                           f"here ({torch.backends.quantized.supported_engines}): sample with the model itself")
    linears = {name: m for name, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    kept = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}  # a tied output layer's too
    memo: dict[int, object] = {}
    for module in linears.values():
        if id(module.weight) not in kept:  # replaced below: an empty placeholder, not a copy
            memo[id(module.weight)] = torch.nn.Parameter(module.weight.detach().new_empty(0), requires_grad=False)
    sampler = copy.deepcopy(model, memo)
    for name, linear in linears.items():
        parent, _, child = name.rpartition(".")
        setattr(sampler.get_submodule(parent) if parent else sampler, child, PackedLinear(linear, kind))
    return sampler.eval().requires_grad_(False)


def repack_(sampler: torch.nn.Module, model: torch.nn.Module, only_parked: bool = False) -> None:
    """Write `model`'s linear weights into `sampler`'s `PackedLinear` layers (only the parked ones if asked)."""
    for name, module in sampler.named_modules():
        if isinstance(module, PackedLinear) and (module.parked or not only_parked):
            module.pack_(model.get_submodule(name))
