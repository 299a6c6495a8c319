"""How much resident memory does each new matrix shape of a bf16 pass hold on a CPU?

bf16-autocast forward and backward passes of SmolLM2-135M (4 rows, half the positions projected) at 80 widths,
40 to 198 tokens; the heap trimmed after each; resident memory printed after every 10 widths, then the same 80
widths again (cached kernels: faster, no more memory). oneDNN compiles and keeps a kernel per shape, up to
ONEDNN_PRIMITIVE_CACHE_CAPACITY (1024 by default); on a CPU without bf16 instructions the passes are emulated.
Run from benchmarks/probes (results/notes/05_probes/onednn_shapes_20261129.json):

    python onednn_shapes.py
    ONEDNN_PRIMITIVE_CACHE_CAPACITY=32 python onednn_shapes.py
    LRU_CACHE_CAPACITY=16 python onednn_shapes.py          # ideep's own cache (PyTorch's oneDNN wrapper)
    LRU_CACHE_CAPACITY=16 ONEDNN_PRIMITIVE_CACHE_CAPACITY=32 python onednn_shapes.py
"""

import os
import time

import torch
from p09_step_time import rss_mb

from agentrl_lite.models import load_policy, release_memory

model, tok = load_policy()
model.train()


def one_pass(width: int) -> None:
    """A bf16-autocast forward and backward of 4 rows of `width` tokens, half the positions projected."""
    ids = torch.randint(5, 1000, (4, width))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(input_ids=ids, logits_to_keep=width // 2).logits
    out.float().logsumexp(-1).mean().backward()
    model.zero_grad(set_to_none=True)


print("caps", {k: os.environ.get(k) for k in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY")},
      "loaded", round(rss_mb()), flush=True)
t = time.perf_counter()
for i, width in enumerate(range(40, 200, 2)):
    one_pass(width)
    release_memory()
    if i % 10 == 9:
        print(width, "widths so far", i + 1, "rss", round(rss_mb()), round(time.perf_counter() - t, 1), flush=True)
t = time.perf_counter()  # the same widths again: cached (fast) or compiled anew
for width in range(40, 200, 2):
    one_pass(width)
release_memory()
print("again", round(rss_mb()), round(time.perf_counter() - t, 1), flush=True)
