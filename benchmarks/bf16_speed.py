"""Is bf16 faster than fp32 on this machine? The measurement behind `models.bf16_is_fast`.

Every "auto" bf16 choice of the course (the sampling copy, bf16 autocast in SFT and in the GRPO loss pass) asks
`models.bf16_is_fast`. On a CPU with AVX512-BF16 or AMX, bf16 halves the bytes and runs natively; elsewhere
oneDNN may still accept bf16 and emulate it. This times, fp32 against bf16, on SmolLM2-135M:

- one matrix product of a decoder layer's MLP shape (1024 tokens × 576 → 1536);
- one SFT step's forward and backward pass (8 rows × 256 tokens, bf16 autocast against none);
- greedy decoding of 32 tokens for 8 prompts with the engine (the fp32 policy against a bf16 copy).

The two settings alternate over `--repeats` rounds so both see the same machine state. Usage:

    python benchmarks/bf16_speed.py [--repeats 3]     # writes results/bench/bench_bf16.json
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time

import numpy as np
import torch

from agentrl_lite.course import write_results
from agentrl_lite.engine import Engine
from agentrl_lite.models import bf16_is_fast, load_policy, sampling_copy


def timed(fn, repeats: int) -> float:
    """Median seconds of `fn()` over `repeats` calls, after one warm-up call."""
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model, tokenizer = load_policy(None)
    a, w = torch.randn(1024, 576), torch.randn(1536, 576)
    ids = torch.randint(100, 40_000, (8, 256))
    prompts = [tokenizer(tokenizer.apply_chat_template([{"role": "user", "content": f"Count to {i + 3}."}],
                                                       add_generation_prompt=True, tokenize=False))["input_ids"]
               for i in range(8)]
    copy = sampling_copy(model, "bfloat16")
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")

    def step(bf16: bool) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        model.zero_grad(set_to_none=True)

    def decode(policy) -> None:
        engine = Engine(policy, tokenizer.pad_token_id, end)
        engine.sample_turn(list(range(8)), [list(p) for p in prompts], 32, temperature=0.0)

    rows = {"matmul": {}, "sft_step": {}, "decode_32_tokens": {}}
    for _ in range(args.repeats):
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            x, y = a.to(dtype), w.to(dtype)
            rows["matmul"].setdefault(name, []).append(timed(lambda x=x, y=y: x @ y.T, 5))
            rows["sft_step"].setdefault(name, []).append(timed(lambda b=name == "bf16": step(b), 1))
            rows["decode_32_tokens"].setdefault(name, []).append(
                timed(lambda m=(copy if name == "bf16" else model): decode(m), 1))
    metrics = {"bf16_is_fast": bf16_is_fast("cpu"),
               "cpu_flags": {flag: bool(getattr(torch.cpu, f"_is_{flag}_supported", lambda: False)())
                             for flag in ("avx512", "avx512_bf16", "amx_tile")},
               "onednn_accepts_bf16": bool(torch.ops.mkldnn._is_mkldnn_bf16_supported()),
               "threads": torch.get_num_threads()}
    for key, by_dtype in rows.items():
        fp32, bf16 = float(np.median(by_dtype["fp32"])), float(np.median(by_dtype["bf16"]))
        metrics[key] = {"fp32_s": fp32, "bf16_s": bf16, "bf16_over_fp32": bf16 / fp32}
        print(f"{key}: fp32 {fp32:.4f} s, bf16 {bf16:.4f} s, bf16/fp32 {bf16 / fp32:.2f}", flush=True)
    write_results("bench_bf16", metrics, profile="cpu", model="SmolLM2-135M-Instruct (embedded)", seed=0,
                  command="python " + " ".join(shlex.quote(x) for x in sys.argv))


if __name__ == "__main__":
    main()
