"""What the chunked vocabulary projection saved: one GRPO loss pass (forward and backward) over a batch shaped like
lesson 10's cpu profile, projecting the scored tokens a chunk at a time against projecting the whole scored span.

Kept for provenance (results/notes/bench_chunked_head_reverted.json); it runs only at commit 1a665c1, whose
`logprobs.token_logprobs` projected the scored tokens `HEAD_CHUNK_TOKENS` at a time and kept the old whole-span path
for heads it could not run itself (`_plain_head` returning None). The change was reverted (c5575d3): it saved under
130 MB of a 2.9 GB peak and cost time.

The batch: 4 prompts of 110 tokens, 8 completions each of 40 to 240 tokens, random token ids, the trainer's
micro-batches (at most 8 rows and 1024 tokens, a shared prompt counted once), gradient checkpointing and the entropy
as in `GRPOTrainer.update`. Each setting runs in a fresh process, after a warm-up pass; the settings alternate over
`--repeats` rounds. Memory is sampled every 5 ms; compare base_mb + above_base_mb (the base after the warm-up
differs between processes). Usage, at 1a665c1:

    python benchmarks/chunked_head.py [--repeats 2]    # wrote results/bench_chunked_head.json
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
import threading
import time

SETTINGS = ("whole span (before)", "chunked")
PROMPTS, GROUP, PROMPT_TOKENS = 4, 8, 110


def _rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20


def one(setting: str) -> dict[str, float]:
    """One process: a warm-up pass, then one timed pass with its memory sampled."""
    import torch

    import agentrl_lite.logprobs as logprobs
    from agentrl_lite.models import load_policy

    if setting == SETTINGS[0]:
        logprobs._plain_head = lambda model: None  # the path of heads the chunked projection cannot run
    torch.manual_seed(0)
    model, tokenizer = load_policy(None)
    model.train()
    generator = torch.Generator().manual_seed(0)
    rows, masks = [], []
    for _ in range(PROMPTS):
        prompt = torch.randint(5, 20000, (PROMPT_TOKENS,), generator=generator).tolist()
        for _ in range(GROUP):
            n = int(torch.randint(40, 241, (1,), generator=generator))
            rows.append(prompt + torch.randint(5, 20000, (n,), generator=generator).tolist())
            masks.append([0] * PROMPT_TOKENS + [1] * n)
    shared = logprobs.shared_with_previous(rows, masks)
    chunks = logprobs.micro_batches([len(r) for r in rows], 8, 1024, shared)

    def loss_pass() -> float:
        model.zero_grad(set_to_none=False)
        total = 0.0
        for idx in chunks:
            width = max(len(rows[i]) for i in idx)
            ids = torch.tensor([rows[i] + [tokenizer.pad_token_id] * (width - len(rows[i])) for i in idx])
            attention = torch.tensor([[1] * len(rows[i]) + [0] * (width - len(rows[i])) for i in idx])
            mask = torch.tensor([masks[i] + [0] * (width - len(masks[i])) for i in idx])
            values, _ = logprobs.token_logprobs(model, ids, attention, mask, 1.0, return_entropy=True, checkpoint=True)
            loss = -(values * mask).sum() / sum(sum(m) for m in masks)
            loss.backward()
            total += loss.item()
        return total

    loss_pass()  # warm-up: the weights paged in, gradients allocated, the allocator's pools
    base, peak, stop = _rss_mb(), [0.0], threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_mb())
            stop.wait(0.005)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    start = time.perf_counter()
    loss = loss_pass()
    seconds = time.perf_counter() - start
    stop.set()
    thread.join()
    grad_norm = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    return {"loss": loss, "grad_norm": float(grad_norm), "seconds": seconds, "base_mb": base,
            "above_base_mb": max(peak[0], _rss_mb()) - base, "micro_batches": float(len(chunks)),
            "scored_tokens": float(sum(sum(m) for m in masks))}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--one", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.one is not None:
        print(json.dumps(one(args.one)))
        return
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in SETTINGS}
    for _ in range(args.repeats):
        for name in SETTINGS:
            out = subprocess.run([sys.executable, __file__, "--one", name], check=True, capture_output=True,
                                 text=True).stdout
            runs[name].append(json.loads(out.strip().splitlines()[-1]))
            print(name, runs[name][-1], flush=True)
    best = {name: min(r, key=lambda r: r["seconds"]) | {"above_base_mb": min(x["above_base_mb"] for x in r)}
            for name, r in runs.items()}
    old, new = (best[name] for name in SETTINGS)
    from agentrl_lite import write_results

    write_results("bench_chunked_head", {
        "runs": runs, "best": best, "episodes": PROMPTS * GROUP, "prompt_tokens": PROMPT_TOKENS,
        "completion_tokens": [40, 240], "time_ratio": new["seconds"] / old["seconds"],
        "memory_saved_mb": old["above_base_mb"] - new["above_base_mb"],
        "loss_difference": abs(new["loss"] - old["loss"]),
        "grad_norm_relative_difference": abs(new["grad_norm"] - old["grad_norm"]) / old["grad_norm"],
    }, profile="cpu", model="SmolLM2-135M-Instruct (embedded), fp32", seed=0,
        command="python " + " ".join(shlex.quote(a) for a in sys.argv))


if __name__ == "__main__":
    main()
