"""Kernel-generation RL (task family): KernelBench-format operators, a backend that compiles, verifies and times
candidate kernels in processes of their own, a tiered speed reward, and the environment lesson 10 trains on.

- `catalog`: the tasks (PyTorch references in KernelBench's format, the C signature, a naive C body);
- `cpu_c`: the C backend (static checks, gcc, link check, forked children with limits);
- `cuda`: the CUDA backend (static checks, nvcc, link check, children that run and time on the GPU);
- `stages`: the stages from a reply to a `Verdict` and its reward (`verify`);
- `env`: the `KernelEnv` environment.
"""

from agentrl_lite.tasks.kernels.catalog import SHAPES, TASKS, KernelTask, task_by_name
from agentrl_lite.tasks.kernels.stages import Verdict, extract_code, tiered_reward, verify

__all__ = ["SHAPES", "TASKS", "KernelTask", "Verdict", "extract_code", "task_by_name", "tiered_reward", "verify"]
