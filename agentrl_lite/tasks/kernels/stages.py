"""From a policy's reply to a reward: parse → static checks → compile → link check → correctness → timing →
reward. Each stage returns what it found; `verify` stops at the first stage that fails and says why.

Correctness: one call on each input set: five seeded sets from the task's inputs, a shifted one (every input
× 10 + 3, so a kernel tuned to standard-normal inputs, or one that returns a memorised output, fails), for
elementwise tasks a set of extremes (large magnitudes, ±inf, NaN, denormals; compared NaN-equal with PyTorch,
except where an input is NaN: a max-like operator may return either operand), and a set at `ODD_SIZES` (a kernel that ignores `n` or assumes a multiple of a vector width fails);
shape and dtype checked, `allclose` with the task's tolerance at that shape set (`KernelTask.tolerance_at`). The
reference outputs come from PyTorch in a separate process and are cached per task and shape set.

Timing: `TIMING_SETS` input sets drawn exactly like the correctness sets (same function, same harness buffers)
from a seed drawn per verification, called in a random order; the candidate in the C harness (harness.py, in the
sandbox: nothing there but the kernel, its buffers and a clock), the reference in a Python child, one after the
other; the median of each after warm-ups; speedup = reference median / candidate median. The output of every
timed call is checked against the reference's, and inputs are read-only during every call. (The cuda backend
runs candidate and reference interleaved in one child on the GPU, cuda.py.)

Reward (tiers in the style of Dr.Kernel's): a failure earns by the stage it reached (a wrong output more than a
compile error), except that a candidate refused by the parse, static or link check (no kernel, or an attempted
hack) earns the least; a correct kernel earns more the faster it is; a speedup above `SUSPICIOUS_SPEEDUP` is
flagged and re-timed on freshly drawn input sets with twice the repeats before it is paid, and the lower of the two
speedups counts.

Backends: `cpu_c` (a ```c function, gcc, timed on one CPU thread) and `cuda` (a ```cuda block with kernels
and a host function, nvcc, run and timed on the GPU against the reference on CUDA tensors); same stages.
"""

from __future__ import annotations

import itertools
import re
import secrets
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

import agentrl_lite.tasks.kernels.children as children
import agentrl_lite.tasks.kernels.cpu_c as cpu_c
import agentrl_lite.tasks.kernels.cuda as cuda
import agentrl_lite.tasks.kernels.harness as harness
from agentrl_lite.phases import timed
from agentrl_lite.tasks.kernels.catalog import SHAPES, KernelTask

CORRECTNESS_SEEDS = (0, 1, 2, 3, 4)
SHIFT_SCALE, SHIFT_OFFSET = 10.0, 3.0
"""the shifted input set: every input × 10 + 3"""
ODD_SIZES = {"n": 1009, "rows": 7, "cols": 131, "m": 13, "k": 11, "p": 19}
"""the sizes of the last correctness set: primes, so no multiple of a vector width, and none a shape set uses"""
ODD_SEED = 5
EXTREMES = (0.0, -0.0, 1e30, -1e30, 3.0e38, -3.0e38, float("inf"), float("-inf"), float("nan"), 1e-40, -1e-40,
            1e-45, 88.5, -88.5, 1e4, -1e4, 0.5)
"""values of the extremes set of elementwise tasks: large magnitudes, ±inf, NaN, denormals, exp's overflow edge"""
TIMING_SETS = 3
"""input sets a timing cycles through (in a random order): a kernel cannot tell a timed call by its input"""
TIMING_TOLERANCE = 1e-3
"""atol = rtol of the output check after every timed call (looser than every task's tolerance: the kernel already
passed its task's own check at the correctness stage)"""
TIERS = ((2.0, 1.0), (1.5, 0.85), (1.2, 0.7), (1.0, 0.5))
"""(speedup at least, reward) for a correct kernel, fastest first"""
CORRECT_BUT_SLOWER = 0.2
INCORRECT, COMPILE_FAILED, INVALID = -0.3, -0.5, -1.0
"""rewards of the failures: wrong output (or a crash, a timeout, mutated inputs) > compile error > no kernel, or one
refused by the static or link check"""
SUSPICIOUS_SPEEDUP = 10.0
"""above this a speedup is re-verified before it is paid (the line is this course's choice; KernelBench's
evaluation notes also call for doubt of suspiciously good speedups)"""
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
    """hack suspicions: "mutated_inputs", "out_of_bounds", "static:<why>", "link:<why>", "suspicious_speedup\""""
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


@dataclass
class InputSet:
    """One input set of a check: the kernel's inputs and int arguments, and what it is called in a message."""

    label: str
    inputs: list[np.ndarray]
    """float32 arrays in the C signature's order, shaped as the task's reference takes them"""
    sizes: list[int]
    """the int arguments after `out`"""
    unchecked: np.ndarray | None = None
    """bool, the output's shape: positions whose value is not checked (elementwise outputs where an input is
    NaN: a max-like operator may return the NaN or the other operand, as C's fmaxf does)"""


def draw_inputs(task: KernelTask, dims: dict[str, int], seed: int) -> list[np.ndarray]:
    """The task's inputs at the sizes `dims`, standard normal from PyTorch's generator with this seed (the
    values `get_inputs()` gives at those sizes). Correctness and timing inputs all come from here."""
    import torch

    torch.manual_seed(seed)
    return [torch.randn(*[dims[d.strip()] for d in shape.split(",")]).numpy().astype(np.float32)
            for _, shape in task.inputs]


def takes_extremes(task: KernelTask) -> bool:
    """Elementwise tasks (every input of n elements) are checked on `EXTREMES` too."""
    return all(shape.strip() == "n" for _, shape in task.inputs)


def _with_extremes(inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Every third element of each input replaced by one of `EXTREMES` (a different mix per input)."""
    out = []
    for j, a in enumerate(inputs):
        a = a.copy()
        where = np.arange(j, a.size, 3)
        a.flat[where] = np.resize(np.roll(np.array(EXTREMES, dtype=np.float32), 5 * j), where.size)
        out.append(a)
    return out


def correctness_sets(task: KernelTask, shape: str) -> list[InputSet]:
    """Five seeded input sets, the shifted one, the extremes (elementwise tasks) at the sizes of `shape`, and one
    seeded set at `ODD_SIZES`."""
    dims = SHAPES[shape]
    sizes = [dims[s] for s in task.sizes]
    sets = [InputSet(f"input set {seed}", draw_inputs(task, dims, seed), sizes) for seed in CORRECTNESS_SEEDS]
    sets.append(InputSet("the shifted input set", [a * SHIFT_SCALE + SHIFT_OFFSET for a in sets[0].inputs], sizes))
    if takes_extremes(task):
        extremes = _with_extremes(sets[0].inputs)
        sets.append(InputSet("the extremes (large magnitudes, inf, NaN, denormals)", extremes, sizes,
                             unchecked=np.any([np.isnan(a) for a in extremes], axis=0)))
    odd = [ODD_SIZES[s] for s in task.sizes]
    sets.append(InputSet(f"the odd sizes {', '.join(f'{s}={ODD_SIZES[s]}' for s in task.sizes)}",
                         draw_inputs(task, ODD_SIZES, ODD_SEED), odd))
    return sets


def correctness_inputs(task: KernelTask, shape: str) -> list[list[np.ndarray]]:
    """The inputs of every correctness set (`correctness_sets`)."""
    return [s.inputs for s in correctness_sets(task, shape)]


REFERENCE_CACHE_SIZE = 4
"""tasks whose reference outputs stay in memory. A GRPO step checks its few tasks many times, so a handful is
enough; each entry holds every correctness set's outputs (up to 28 MB per task at the cpu shapes), and keeping
all 62 tasks, as an earlier cache of 128 did, held 1.1 GB in lesson 10's kernel. Recomputing one costs about
0.2 s (docs/design/10_kernel_generation_rl.md)"""


@lru_cache(maxsize=REFERENCE_CACHE_SIZE)
def reference_outputs(task: KernelTask, shape: str) -> list[np.ndarray]:
    """The reference's outputs on `correctness_sets`, computed by PyTorch in a separate process (the last
    `REFERENCE_CACHE_SIZE` tasks' are kept)."""
    status, value = children.run_in_child(children.reference_child, (task.reference_source(shape),
                                                                     correctness_inputs(task, shape)), timeout_s=120)
    if status != "ok":
        raise RuntimeError(f"the reference of {task.name} failed: {value}")
    return value


def _run(backend: str, library: str, sets: list[InputSet], out_shapes: list[tuple[int, ...]], calls: list[int],
         timeout_s: float) -> harness.Calls:
    """The candidate's output on `sets[calls[j]]` for every j: in the C harness (cpu_c), or in a Python child per
    shape (cuda: outputs only, its timing is `_time_cuda`)."""
    if backend == "cpu_c":
        return harness.run(library, [s.inputs for s in sets], [s.sizes for s in sets], out_shapes, calls, timeout_s)
    result = harness.Calls("ok")
    for _, group in itertools.groupby(calls, key=lambda s: tuple(sets[s].sizes)):  # one child per shape
        group = list(group)
        status, value = children.run_in_child(cuda._candidate_child, (library, [sets[s].inputs for s in group],
                                                                      out_shapes[group[0]], sets[group[0]].sizes),
                                              timeout_s)
        if status != "ok":
            return harness.Calls(status, str(value))
        result.outputs += value
    return result


def check_correctness(task: KernelTask, library: str, shape: str,
                      backend: str = "cpu_c") -> tuple[bool, str, list[str]]:
    """(correct, message, flags) of a compiled candidate on every correctness input set, one call each."""
    sets, expected = correctness_sets(task, shape), reference_outputs(task, shape)
    ran = _run(backend, library, sets, [e.shape for e in expected], list(range(len(sets))),
               BACKENDS[backend].RUN_TIMEOUT_S)
    if ran.status != "ok":
        return False, ran.message, {"mutated": ["mutated_inputs"], "out_of_bounds": ["out_of_bounds"]}.get(
            ran.status, [])
    for input_set, got, want in zip(sets, ran.outputs, expected, strict=True):
        if got.shape != want.shape or got.dtype != np.float32:
            return False, (f"{input_set.label}: output shape/dtype {got.shape} {got.dtype}, expected {want.shape} "
                           "float32"), []
        tolerance = task.tolerance_at(shape)
        close = np.isclose(got, want, atol=tolerance, rtol=tolerance, equal_nan=True)
        if input_set.unchecked is not None:
            close |= input_set.unchecked
        if not close.all():
            where = tuple(int(j) for j in np.argwhere(~close)[0])
            return False, (f"{input_set.label}: {int((~close).sum())} of {close.size} values wrong, e.g. at {where}: "
                           f"{got[where]:.6g} instead of {want[where]:.6g}"), []
    return True, f"correct on {len(sets)} input sets", []


def time_candidate(task: KernelTask, library: str, shape: str, warmup: int = 3, repeats: int = 15,
                   seed: int | None = None, backend: str = "cpu_c") -> tuple[float, float] | str:
    """(candidate seconds, reference seconds), medians over `repeats` calls after `warmup`, on `TIMING_SETS` input
    sets drawn like the correctness sets with a seed drawn now (unless given), called in a random order; or why
    timing failed. The candidate runs in the harness and the reference in a Python child, one after the other;
    the output of every timed call is checked against the reference's."""
    seed = secrets.randbits(31) if seed is None else seed
    dims = SHAPES[shape]
    sets = [InputSet(f"timing set {k}", draw_inputs(task, dims, seed + k), [dims[s] for s in task.sizes])
            for k in range(TIMING_SETS)]
    if backend == "cuda":
        return _time_cuda(task, library, shape, sets[0], warmup, repeats)
    calls = harness.schedule(TIMING_SETS, -(-(warmup + repeats) // TIMING_SETS), shuffle=True)[:warmup + repeats]
    if calls[1] != calls[0] and not any(a == b for a, b in zip(calls[1:], calls[2:], strict=False)):
        calls[1] = calls[0]  # one call repeats its predecessor's buffers: a cache keyed by them shows (NaN left)
    status, value = children.run_in_child(children.reference_timing_child, (task.reference_source(shape),
                                          [s.inputs for s in sets], calls, warmup), timeout_s=120)
    if status != "ok":
        raise RuntimeError(f"the reference of {task.name} failed: {value}")
    reference_seconds, expected, _ = value  # the page faults are for tests (children.keep_freed_memory)
    ran = _run(backend, library, sets, [e.shape for e in expected], calls, cpu_c.TIMING_TIMEOUT_S)
    if ran.status != "ok":
        return f"timing failed: {ran.message}"
    for i, (s, got) in enumerate(zip(calls, ran.outputs, strict=True)):
        if not np.allclose(got, expected[s], atol=TIMING_TOLERANCE, rtol=TIMING_TOLERANCE, equal_nan=True):
            return (f"timing failed: call {i + 1} of the timing left a wrong output (the output buffer is reset "
                    "before every call): does the kernel keep state between calls?")
    return float(np.median(ran.seconds[warmup:])), reference_seconds


def _time_cuda(task: KernelTask, library: str, shape: str, timing_set: InputSet, warmup: int,
               repeats: int) -> tuple[float, float] | str:
    """The cuda backend's timing: candidate and reference interleaved on the GPU in one child (cuda.py)."""
    out_shape = reference_outputs(task, shape)[0].shape
    status, value = children.run_in_child(cuda._timing_child, (library, task.reference_source(shape),
                                                               timing_set.inputs, out_shape, timing_set.sizes,
                                                               warmup, repeats), timeout_s=cuda.RUN_TIMEOUT_S * 3)
    return value if status == "ok" else f"timing failed: {value}"


def tiered_reward(speedup: float) -> float:
    """The reward of a correct kernel with this speedup."""
    for threshold, reward in TIERS:
        if speedup >= threshold:
            return reward
    return CORRECT_BUT_SLOWER


@timed("environment")
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
        again = time_candidate(task, compiled.library, shape, repeats=31, backend=backend)
        if isinstance(again, str):
            return Verdict("timing", INCORRECT, again, flags=flags, source=source)
        speedup = min(speedup, again[1] / again[0])
    return Verdict("done", tiered_reward(speedup), f"{message}; {speedup:.2f}x the reference "
                   f"({timed[0] * 1e3:.3f} ms vs {timed[1] * 1e3:.3f} ms)", correct=True, speedup=speedup,
                   flags=flags, source=source)
