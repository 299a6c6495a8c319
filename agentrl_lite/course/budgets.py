"""What a notebook may spend (course tooling): the wall-clock and memory budgets per profile, and how much slower
than the reference machine this one runs now, which stretches the smoke budget on a busy machine."""

from __future__ import annotations

import time

from agentrl_lite.course.results import read_results

BUDGET_S = {"smoke": 60, "cpu": 20 * 60, "gpu": 30 * 60}
"""Stated wall-clock budget per notebook and profile (the README's profile table); the report flags notebooks above it."""
CELL_TIMEOUT_S = {"smoke": 300, "cpu": 4 * BUDGET_S["cpu"], "gpu": 2 * BUDGET_S["gpu"]}
"""A cell that runs longer is stopped with a CellTimeoutError: a guard against a hung cell, not the budget (the
report flags a slow notebook; it does not stop one). The smoke guard is 300 s, as `make test`'s
--nbval-cell-timeout: a slow CI machine then reports a lesson over its budget, not a hung cell. The cpu profile's
guard is four budgets: on a CPU without bf16 instructions lesson 05's training cell, two GRPO runs and their
evaluations, ran past two (docs/design/05_rl_for_tool_calls.md)"""
SMOKE_WITHOUT_FAST_BF16 = 25 / 15
"""How much longer a smoke notebook may take on a CPU without fast bf16: the ratio of the test suite's two limits
(15 minutes of `make test` with fast bf16, 25 without). There every bf16 choice runs in fp32, slower than the
fp32 reference workload's ratio alone says."""


def smoke_budget_s() -> float:
    """The smoke budget of one notebook on this machine: `BUDGET_S["smoke"]` where bf16 is fast, times
    `SMOKE_WITHOUT_FAST_BF16` where it is not (before the slack and the measured slowdown)."""
    from agentrl_lite.models import bf16_is_fast

    return BUDGET_S["smoke"] * (1.0 if bf16_is_fast() else SMOKE_WITHOUT_FAST_BF16)


MEMORY_BUDGET_MB = {"smoke": 4096, "cpu": 4096}
"""Peak resident memory a notebook's kernel may use (a student laptop's share); the report flags notebooks above
it, and in the smoke profile (CI) a notebook above it fails with MemoryBudgetExceeded"""


def reference_workload() -> float:
    """Seconds this machine takes now for a fixed piece of the course's kind of work: SmolLM2-135M's matrix shapes
    (width 576, MLP 1536, 3 key-value heads' width), one layer's weights run 30 times, over 2 × 128 tokens and then
    16 one-token steps of 4 rows, fp32, torch's default threads. No model files; the same arithmetic on every
    machine."""
    import torch

    gen = torch.Generator().manual_seed(0)
    width, hidden, kv = 576, 1536, 192
    layer = [torch.randn(*shape, generator=gen) / shape[0] ** 0.5
             for shape in ((width, width), (width, kv), (width, kv), (width, width),
                           (width, hidden), (width, hidden), (hidden, width))]

    def forward(x: torch.Tensor) -> torch.Tensor:
        for _ in range(30):
            q, k, v = x @ layer[0], x @ layer[1], x @ layer[2]
            attn = torch.softmax(q[..., :kv] @ k.transpose(-1, -2) / 8.0, dim=-1) @ v
            x = x + torch.cat([attn] * 3, dim=-1) @ layer[3]
            x = x + (torch.nn.functional.silu(x @ layer[4]) * (x @ layer[5])) @ layer[6]
            x = x / x.norm(dim=-1, keepdim=True)
        return x

    start = time.perf_counter()
    with torch.no_grad():
        forward(torch.randn(2, 128, width, generator=gen))
        for _ in range(16):
            forward(torch.randn(4, 1, width, generator=gen))
    return time.perf_counter() - start


MAX_SLOWDOWN = 3.0
"""no slowdown excuses more than this overrun: a notebook over its budget times this fails without the measurement"""


def machine_slowdown(repeats: int = 3) -> float:
    """How many times slower than the machine the smoke budget was set on this one runs now: `reference_workload`'s
    best of `repeats` over the reference's (results/bench/bench_smoke_reference.json), at least 1 and at most 3. A busy CI
    machine stretches a notebook's smoke budget by it; no slowdown excuses more than a threefold overrun, and 1 when
    the reference was never measured."""
    record = read_results("bench_smoke_reference")
    if record is None:
        return 1.0
    best = min(reference_workload() for _ in range(repeats))
    return min(MAX_SLOWDOWN, max(1.0, best / record["metrics"]["reference_workload_s"]))


def allowed_seconds(seconds: float, budget: float, slack: float) -> tuple[float, str]:
    """The seconds a notebook that took `seconds` may take against `budget` × `slack`, and why: stretched by
    `machine_slowdown`, measured only when the overrun is one a slowdown could excuse (at most `MAX_SLOWDOWN`)."""
    allowed = slack * budget
    if allowed < seconds <= allowed * MAX_SLOWDOWN:
        slowdown = machine_slowdown()
        return allowed * slowdown, f"this machine's slowdown {slowdown:.2f}×"
    return allowed, f"no slowdown excuses over {MAX_SLOWDOWN:.0f}×" if seconds > allowed else "no slowdown needed"
