"""The environment defaults importing agentrl_lite sets for torch, and why: the package's only import-time effect.

Each is a `setdefault`: a value the user exported wins.

- TORCHINDUCTOR_CACHE_DIR: torch creates its compiler cache when torch._dynamo is first imported (loading a model
  does it), by default in /tmp/torchinductor_<user>, where it outlives every run. It goes with the course's other
  caches (`paths.cache_root`).
- ONEDNN_PRIMITIVE_CACHE_CAPACITY, LRU_CACHE_CAPACITY: under bf16 on a CPU every new matrix shape compiles a oneDNN
  kernel, kept in two caches, oneDNN's own (1024 kernels by default) and that of PyTorch's oneDNN wrapper ideep
  (1024). RL passes change width with every batch, so both fill: about 17 MB a shape, over a gigabyte in one
  lesson (docs/design/engine_and_memory.md). Small caps keep memory flat. Both libraries read these variables when
  they first build a kernel, so setting them here works even after torch was imported.
"""

from __future__ import annotations

import os

from agentrl_lite.paths import cache_root

DEFAULTS = {
    "TORCHINDUCTOR_CACHE_DIR": str(cache_root() / "torchinductor"),
    "ONEDNN_PRIMITIVE_CACHE_CAPACITY": "32",
    "LRU_CACHE_CAPACITY": "16",
}

for _name, _value in DEFAULTS.items():
    os.environ.setdefault(_name, _value)
