"""From a policy's reply to a reward: parse → static checks → compile → link check → correctness → timing →
reward. Each stage returns what it found; `verify` stops at the first stage that fails and says why.

Correctness: five seeded input sets from the task's `get_inputs()` plus one from a shifted distribution
(every input × 10 + 3, so a kernel tuned to standard-normal inputs, or one that returns a memorised output,
fails), shape and dtype checked, `allclose` with the task's fp32 tolerance. The reference outputs come from
PyTorch in a separate process and are cached per task, shape set and seed.

Timing: warm-ups, then candidate and reference called alternately (one of each per round) on one thread in
one process, the median of each; speedup = reference median / candidate median.

Reward (tiers in the style of Dr.Kernel and Kevin): a failure earns less the earlier it happens; a correct
kernel earns more the faster it is; a speedup above `SUSPICIOUS_SPEEDUP` is flagged and re-timed on another
input set with twice the repeats before it is paid, and the lower of the two speedups counts.

Backends: `cpu_c` (a ```c function, gcc, timed on one CPU thread) and `cuda` (a ```cuda block with kernels
and a host function, nvcc, run and timed on the GPU against the reference on CUDA tensors); same stages.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

import agentrl_lite.tasks.kernels.cpu_c as cpu_c
import agentrl_lite.tasks.kernels.cuda as cuda
from agentrl_lite.tasks.kernels.catalog import SHAPES, KernelTask

CORRECTNESS_SEEDS = (0, 1, 2, 3, 4)
SHIFT_SCALE, SHIFT_OFFSET = 10.0, 3.0
"""the shifted input set: every input × 10 + 3"""
TIERS = ((2.0, 1.0), (1.5, 0.85), (1.2, 0.7), (1.0, 0.5))
"""(speedup at least, reward) for a correct kernel, fastest first"""
CORRECT_BUT_SLOWER = 0.2
INCORRECT, COMPILE_FAILED, INVALID = -0.3, -0.5, -1.0
"""rewards of the failures: wrong output (or a crash, a timeout, mutated inputs) > no library > no kernel"""
SUSPICIOUS_SPEEDUP = 10.0
"""above this a speedup is re-verified before it is paid (KernelBench: anything above 10x is suspicious)"""
_CODE = re.compile(r"```(?:c|C)\s*\n(.*?)```", re.S)
BACKENDS = {"cpu_c": cpu_c, "cuda": cuda}
"""backend name → its module: static checks, link check and the children that run and time a candidate"""


@dataclass
class Verdict:
    """What happened to one candidate, stage by stage."""

    stage: str
    """the last stage reached: "parse", "static", "compile", "link", "correctness", "timing" or "done\""""
    reward: float
    message: str = ""
    """why it failed (compiler log, mismatch, crash), or a summary when it passed"""
    correct: bool = False
    speedup: float | None = None
    """reference median / candidate median, when timed"""
    flags: list[str] = field(default_factory=list)
    """hack suspicions: "mutated_inputs", "static:<why>", "link:<why>", "suspicious_speedup\""""
    source: str | None = None

    def metrics(self) -> dict[str, float]:
        """fast_p (KernelBench): correct and faster than p× the reference."""
        s = self.speedup or 0.0
        return {"reward": self.reward, "correct": float(self.correct), "compiled": float(self.stage not in
                ("parse", "static", "compile")), "fast_0": float(self.correct), "fast_1": float(self.correct and s > 1.0),
                "fast_1.2": float(self.correct and s > 1.2), "speedup": s if self.correct else 0.0,
                "flagged": float(bool(self.flags))}


def extract_code(text: str) -> str | None:
    """The last ```c fenced block of a reply, or None."""
    blocks = _CODE.findall(text or "")
    return blocks[-1] if blocks else None


def correctness_inputs(task: KernelTask, shape: str) -> list[list[np.ndarray]]:
    """Five seeded input sets from `get_inputs()` and the shifted one, as float32 arrays."""
    import torch

    namespace: dict = {}
    exec(compile(task.reference_source(shape), f"<{task.name}>", "exec"), namespace)
    sets = []
    for seed in CORRECTNESS_SEEDS:
        torch.manual_seed(seed)
        sets.append([t.numpy().astype(np.float32) for t in namespace["get_inputs"]()])
    sets.append([a * SHIFT_SCALE + SHIFT_OFFSET for a in sets[0]])
    return sets


REFERENCE_CACHE_SIZE = 4
"""tasks whose reference outputs stay in memory. A GRPO step checks its few tasks many times, so a handful is
enough; each entry holds six input sets' outputs (up to 24 MB per task at the cpu shapes), and keeping all 62
tasks, as an earlier cache of 128 did, held 1.1 GB in lesson 10's kernel. Recomputing one costs about 0.2 s
(docs/design/10_kernel_generation_rl.md)"""


@lru_cache(maxsize=REFERENCE_CACHE_SIZE)
def reference_outputs(task: KernelTask, shape: str) -> list[np.ndarray]:
    """The reference's outputs on `correctness_inputs`, computed by PyTorch in a separate process (the last
    `REFERENCE_CACHE_SIZE` tasks' are kept)."""
    status, value = cpu_c.run_in_child(cpu_c._reference_child, (task.reference_source(shape),
                                                                correctness_inputs(task, shape)), timeout_s=120)
    if status != "ok":
        raise RuntimeError(f"the reference of {task.name} failed: {value}")
    return value


def _sizes(task: KernelTask, shape: str) -> list[int]:
    return [SHAPES[shape][s] for s in task.sizes]


def check_correctness(task: KernelTask, library: str, shape: str,
                      backend: str = "cpu_c") -> tuple[bool, str, list[str]]:
    """(correct, message, flags) of a compiled candidate on every correctness input set."""
    inputs, expected = correctness_inputs(task, shape), reference_outputs(task, shape)
    runner = BACKENDS[backend]
    status, value = cpu_c.run_in_child(runner._candidate_child, (library, inputs, expected[0].shape,
                                                                 _sizes(task, shape)), runner.RUN_TIMEOUT_S)
    if status == "mutated":
        return False, str(value), ["mutated_inputs"]
    if status != "ok":
        return False, str(value), []
    for i, (got, want) in enumerate(zip(value, expected, strict=True)):
        label = "the shifted input set" if i == len(CORRECTNESS_SEEDS) else f"input set {i}"
        if got.shape != want.shape or got.dtype != np.float32:
            return False, f"{label}: output shape/dtype {got.shape} {got.dtype}, expected {want.shape} float32", []
        if not np.allclose(got, want, atol=task.tolerance, rtol=task.tolerance):
            bad = ~np.isclose(got, want, atol=task.tolerance, rtol=task.tolerance)
            where = tuple(int(j) for j in np.argwhere(bad)[0])
            return False, (f"{label}: {int(bad.sum())} of {bad.size} values wrong, e.g. at {where}: "
                           f"{got[where]:.6g} instead of {want[where]:.6g}"), []
    return True, f"correct on {len(value)} input sets", []


def timing_inputs(task: KernelTask, shape: str, seed: int) -> list[np.ndarray]:
    """One input set from `get_inputs()` with this seed."""
    import torch

    namespace: dict = {}
    exec(compile(task.reference_source(shape), f"<{task.name}>", "exec"), namespace)
    torch.manual_seed(seed)
    return [t.numpy().astype(np.float32) for t in namespace["get_inputs"]()]


def time_candidate(task: KernelTask, library: str, shape: str, warmup: int = 3, repeats: int = 15,
                   seed: int = 100, backend: str = "cpu_c") -> tuple[float, float] | str:
    """(candidate seconds, reference seconds), medians of interleaved calls on a fresh input set; or why
    timing failed."""
    out_shape = reference_outputs(task, shape)[0].shape
    runner = BACKENDS[backend]
    status, value = cpu_c.run_in_child(runner._timing_child, (library, task.reference_source(shape),
                                                              timing_inputs(task, shape, seed), out_shape,
                                                              _sizes(task, shape), warmup, repeats),
                                       timeout_s=runner.RUN_TIMEOUT_S * 3)
    return value if status == "ok" else f"timing failed: {value}"


def tiered_reward(speedup: float) -> float:
    """The reward of a correct kernel with this speedup."""
    for threshold, reward in TIERS:
        if speedup >= threshold:
            return reward
    return CORRECT_BUT_SLOWER


def verify(task: KernelTask, reply: str, shape: str = "cpu", timing: bool = True,
           backend: str = "cpu_c") -> Verdict:
    """Every stage on one policy reply (the text holding a ```c block; a ```cuda block for backend="cuda").

    The cuda backend parses and checks statically anywhere; from the compile stage on it needs nvcc and a GPU,
    and without them raises RuntimeError (saying what to do) rather than pay a candidate for the machine.
    """
    if backend not in BACKENDS:
        raise ValueError(f"unknown kernel backend {backend!r}; known: {', '.join(BACKENDS)}")
    source = extract_code(reply) if backend == "cpu_c" else cuda.extract_code(reply)
    if source is None:
        return Verdict("parse", INVALID,
                       "no ```c code block in the reply" if backend == "cpu_c" else cuda.NO_CODE_BLOCK)
    problems = BACKENDS[backend].static_problems(source, task.signature)
    if problems:
        return Verdict("static", INVALID, "; ".join(problems), flags=[f"static:{p}" for p in problems],
                       source=source)
    compiled = cpu_c.compile_c(source) if backend == "cpu_c" else cuda.compile_cuda(source, task.signature)
    if not compiled.ok:
        return Verdict("compile", COMPILE_FAILED, compiled.log, source=source)
    problems = BACKENDS[backend].link_problems(compiled.library)
    if problems:
        return Verdict("link", INVALID, "; ".join(problems), flags=[f"link:{p}" for p in problems], source=source)
    correct, message, flags = check_correctness(task, compiled.library, shape, backend)
    if not correct:
        return Verdict("correctness", INCORRECT, message, flags=flags, source=source)
    if not timing:
        return Verdict("done", CORRECT_BUT_SLOWER, message, correct=True, source=source)
    timed = time_candidate(task, compiled.library, shape, backend=backend)
    if isinstance(timed, str):
        return Verdict("timing", INCORRECT, timed, source=source)
    speedup = timed[1] / timed[0]
    flags = []
    if speedup > SUSPICIOUS_SPEEDUP:  # re-time on another input set before paying
        flags.append("suspicious_speedup")
        again = time_candidate(task, compiled.library, shape, repeats=31, seed=101, backend=backend)
        if isinstance(again, str):
            return Verdict("timing", INCORRECT, again, flags=flags, source=source)
        speedup = min(speedup, again[1] / again[0])
    return Verdict("done", tiered_reward(speedup), f"{message}; {speedup:.2f}x the reference "
                   f"({timed[0] * 1e3:.3f} ms vs {timed[1] * 1e3:.3f} ms)", correct=True, speedup=speedup,
                   flags=flags, source=source)
