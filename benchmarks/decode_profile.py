"""Where a rollout's time goes on a CPU (issue 64): one batch of single-turn episodes, taken apart.

For each batch size and sampler precision (the bf16 copy the trainer samples with where bf16 is fast, and the
fp32 policy): the whole rollout's seconds and generated tokens per second, against the same rollout's parts timed
inside it — the prefill of the batch's prompts (`engine._start_fresh`), the decoding steps (`engine._forward` of
one token per row) and the token sampler (`engine.sample_tokens`, temperature 1), timed by wrapping the engine's
functions during the rollout — and one decoding step of the full batch alone. That step is profiled by operation
class (matrix products, attention's softmax arithmetic, dtype conversions and copies, everything else: self CPU
time), and the matrix
products of a step are timed alone at the step's shapes (the 7 projections of a layer, times the layers, and the
vocabulary projection), as a rate against a square 1024 x 1024 product's: the shapes of decoding run far below
it. The prompts are lesson 04's arithmetic tasks with the course's system prompt (a shared prefix, as in GRPO).

    python benchmarks/decode_profile.py          # writes results/bench/bench_decode_profile.json
"""

from __future__ import annotations

import argparse
import copy
import shlex
import statistics
import sys
import time

import torch
from grpo_step import matmul_gflops  # a square 1024 x 1024 product's rate, as that benchmark measures it

MAX_NEW_TOKENS = 48
CLASSES = {
    "matrix products": ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm"),
    "softmax arithmetic": ("aten::exp", "aten::exp_", "aten::amax", "aten::sum", "aten::maximum", "aten::div",
                           "aten::sub", "aten::_softmax", "aten::softmax"),
    "conversions and copies": ("aten::copy_", "aten::_to_copy", "aten::to", "aten::contiguous", "aten::clone",
                               "aten::cat", "aten::index_put_", "aten::fill_"),
}


def step_products(model: torch.nn.Module, rows: int, repeats: int = 20) -> dict[str, float]:
    """The matrix products of one decoding step alone, at its shapes: (rows × in) @ (in × out) for every linear
    layer, on the model's own weights; their seconds and GFLOPS."""
    weights = [m.weight for m in model.modules() if isinstance(m, torch.nn.Linear)]
    inputs = [torch.randn(rows, w.shape[1], dtype=w.dtype) for w in weights]
    for x, w in zip(inputs, weights, strict=True):
        torch.nn.functional.linear(x, w)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for x, w in zip(inputs, weights, strict=True):
            torch.nn.functional.linear(x, w)
        times.append(time.perf_counter() - start)
    seconds = statistics.median(times)
    flops = sum(2 * rows * w.shape[0] * w.shape[1] for w in weights)
    return {"seconds": seconds, "gflops": flops / seconds / 1e9, "products": len(weights)}


def profile_step(model, batch, tokens, valid, steps: int = 5) -> dict[str, float]:
    from torch.profiler import ProfilerActivity, profile

    from agentrl_lite.engine import _forward

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            _forward(model, batch, tokens[:, None], valid, batch.positions[:, None])
            batch.positions = batch.positions + 1
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in events)
    shares = {name: sum(e.self_cpu_time_total for e in events if e.key in keys) / total for name, keys in CLASSES.items()}
    shares["everything else"] = 1 - sum(shares.values())
    return {"self_cpu_ms_per_step": total / steps / 1000, "aten_calls_per_step": sum(e.count for e in events) / steps,
            "shares": shares}


class _Clock:
    """Seconds spent in the engine's parts during one real rollout: the engine module's functions wrapped, each
    second counted once (the decoding steps' `_forward` outside the prefill's own calls of it)."""

    PARTS = {"_start_fresh": "prefill", "_continue": "prefill", "_forward": "decoding steps",
             "sample_tokens": "token sampling"}

    def __init__(self) -> None:
        import agentrl_lite.engine as engine

        self.engine, self.seconds, self.depth, self.saved = engine, dict.fromkeys(self.PARTS.values(), 0.0), 0, {}

    def __enter__(self) -> _Clock:
        for name, part in self.PARTS.items():
            original = self.saved[name] = getattr(self.engine, name)
            setattr(self.engine, name, self._wrapped(original, part))
        return self

    def _wrapped(self, original, part):
        def timed(*args, **kwargs):
            if self.depth:  # inside another timed part (the prefill's own forward passes)
                return original(*args, **kwargs)
            self.depth += 1
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
                self.depth -= 1
        return timed

    def __exit__(self, *exc) -> None:
        for name, original in self.saved.items():
            setattr(self.engine, name, original)


def measure(model, tokenizer, prompts: list[list[int]], messages, toolboxes, rows: int) -> dict:
    from agentrl_lite.engine import _forward, _start_fresh
    from agentrl_lite.rollout import RolloutConfig, rollout

    chosen, ids = messages[:rows], prompts[:rows]
    config = RolloutConfig(max_turns=1, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, batch_size=rows,
                           progress=False)
    rollout(model, tokenizer, chosen, toolboxes[:rows], config)  # warm-up: oneDNN's kernels for these shapes
    with _Clock() as clock:
        start = time.perf_counter()
        episodes = rollout(model, tokenizer, chosen, toolboxes[:rows], config)
        whole = time.perf_counter() - start
    generated = sum(ep.num_model_tokens for ep in episodes)
    parts = dict(clock.seconds)
    parts["the rest (python, finished rows, caches)"] = whole - sum(parts.values())

    with torch.no_grad():  # one decoding step of the full batch, alone, and its profile
        batch, logits = _start_fresh(model, ids, tokenizer.pad_token_id, MAX_NEW_TOKENS + 8)
        tokens = logits.argmax(-1)
        valid = torch.ones(rows, 1, dtype=torch.bool)
        steps = []
        for _ in range(20):
            start = time.perf_counter()
            _forward(model, batch, tokens[:, None], valid, batch.positions[:, None])
            steps.append(time.perf_counter() - start)
            batch.positions = batch.positions + 1
        step = statistics.median(steps[3:])
        fresh, _ = _start_fresh(model, ids, tokenizer.pad_token_id, MAX_NEW_TOKENS + 8)
        profiled = profile_step(model, fresh, tokens, valid)
    return {"rollout_seconds": whole, "generated_tokens": generated, "tokens_per_s": generated / whole,
            "parts_seconds": parts, "decode_step_ms": step * 1000, "decode_step_tokens_per_s": rows / step,
            "step_profile": profiled, "step_products": step_products(model, rows)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--name", default="bench_decode_profile", help="results/bench/<name>.json")
    args = parser.parse_args()

    from agentrl_lite.chat import encode_prompt
    from agentrl_lite.course import seed_everything, write_results
    from agentrl_lite.models import bf16_is_fast, load_policy
    from agentrl_lite.tasks import DATA_DIR, read_jsonl
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv

    seed_everything(0)
    model, tokenizer = load_policy()
    env = ArithmeticEnv()
    tasks = read_jsonl(DATA_DIR / "arithmetic_train.jsonl")[:max(args.batches)]
    messages = [env.prompt(t) for t in tasks]
    toolboxes = [env.toolbox_for(t) for t in tasks]
    prompts = [encode_prompt(tokenizer, list(m), toolboxes[i].schemas) for i, m in enumerate(messages)]
    metrics: dict = {"threads": torch.get_num_threads(), "bf16_is_fast": bf16_is_fast(),
                     "max_new_tokens": MAX_NEW_TOKENS, "prompt_tokens_mean": statistics.mean(map(len, prompts)),
                     "square_gflops": {"bfloat16": matmul_gflops(torch.bfloat16), "float32": matmul_gflops(torch.float32)}}
    flops_per_token = 2 * sum(p.numel() for p in model.parameters())
    copies = {"float32": model, "bfloat16": copy.deepcopy(model).to(torch.bfloat16)}
    for dtype, policy in copies.items():
        for rows in args.batches:
            row = measure(policy, tokenizer, prompts, messages, toolboxes, rows)
            row["share_of_square_bound"] = row["tokens_per_s"] * flops_per_token / (metrics["square_gflops"][dtype] * 1e9)
            row["decode_step_share_of_square_bound"] = \
                row["decode_step_tokens_per_s"] * flops_per_token / (metrics["square_gflops"][dtype] * 1e9)
            metrics[f"{dtype}_batch{rows}"] = row
            print(f"{dtype} batch {rows}: rollout {row['tokens_per_s']:.0f} tok/s, full-batch decoding step "
                  f"{row['decode_step_tokens_per_s']:.0f} tok/s ({row['decode_step_ms']:.1f} ms), parts "
                  + ", ".join(f"{k} {v:.2f} s" for k, v in row["parts_seconds"].items())
                  + f"; products {row['step_products']['gflops']:.0f} GFLOPS against "
                  f"{metrics['square_gflops'][dtype]:.0f} square; step shares "
                  + ", ".join(f"{k} {v:.0%}" for k, v in row["step_profile"]["shares"].items()), flush=True)
    path = write_results(args.name, metrics, profile="cpu", model="SmolLM2-135M-Instruct (embedded)", seed=0,
                         command="python " + " ".join(shlex.quote(a) for a in sys.argv))
    print("wrote", path)


if __name__ == "__main__":
    main()
