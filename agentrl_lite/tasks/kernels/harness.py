"""Where a `cpu_c` candidate runs: a small C program (harness.c) inside the sandbox, never a Python process.

The layers between a candidate and the caller, outermost first:
- the sandbox (`agentrl_lite.sandbox.run_command`, bubblewrap or unshare): the harness sees the system's
  libraries, itself and the candidate's library, read-only, and a private /tmp; not the checkout, data/ or any
  home directory. No network, no capabilities, a pid namespace (nothing it starts outlives it), memory and
  CPU limits, and the whole sandbox killed after the timeout. Where no backend can isolate code, running a
  candidate raises `SandboxUnavailableError` (AGENTRL_SANDBOX=rlimit runs it anyway, warned);
- seccomp filters in the harness: while the library loads, files open read-only and no process, socket or
  signal to another process can be made; from the first call on, only writing to stdout, the clock and exit
  (anything else kills the process);
- buffers between guard pages, inputs read-only, the output's slack filled with canaries, `out` reset to NaN
  and the stack below the call zeroed before every call, the call's frame moved by a random shift;
- the parent writes raw float32 inputs to the harness's stdin and reads fixed-size records from its stdout:
  numbers only, never an object to unpickle.

The harness runs a schedule of calls over input sets it cannot tell apart (every set is allocated the same way)
and reports each call's output and its time; correctness and timing are both schedules. The kernel shares the
harness's address space, so a kernel that overwrote the harness's own memory could misreport its time: the
compile side (no system calls, assembly, imports or writable data of its own) is the layer against that.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import signal
import struct
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

import numpy as np

from agentrl_lite import sandbox

SOURCE = Path(__file__).with_name("harness.c")
FLAGS = ("-O2", "-std=gnu11", "-Wall", "-Wl,-z,now")
MAGIC, RECORD_CALL, RECORD_FAULT, RECORD_END = 0x4E52484B, 1, 2, 3
FAULT_SETUP = 5
MAX_SHIFT = 64 << 10
"""largest random shift (bytes) of the candidate's stack frame on a call (harness.c's MAX_SHIFT)"""
MEMORY_BUDGET_BYTES = 256 << 20
"""address space the harness may use besides its buffers (the loader, libc, libm, the candidate's code)"""
_FAULTS = {
    1: ("mutated", "the kernel changed its inputs (they are read-only)"),
    2: ("out_of_bounds", "the kernel read or wrote past the end of a buffer"),
    4: ("out_of_bounds", "the kernel wrote outside its output buffer"),
}
_SIGNALS = {signal.SIGSEGV: "segmentation fault", signal.SIGBUS: "bus error", signal.SIGILL: "illegal instruction",
            signal.SIGFPE: "arithmetic exception", signal.SIGABRT: "aborted", signal.SIGTRAP: "trap",
            signal.SIGSYS: "a system call a kernel may not make (seccomp)", signal.SIGXCPU: "CPU-time limit",
            signal.SIGKILL: "killed (memory or CPU-time limit)"}


@dataclass
class Calls:
    """What the harness reported: per call, in schedule order, the output and the seconds it took."""

    status: str
    """"ok", or why the run stopped: "mutated", "out_of_bounds", "crashed", "timeout", "error\""""
    message: str = ""
    outputs: list[np.ndarray] = field(default_factory=list)
    """(out_shape of the call's set) float32 — what the kernel wrote into `out` (NaN-filled before the call)"""
    seconds: list[float] = field(default_factory=list)


@lru_cache(maxsize=1)
def binary() -> str:
    """The harness, compiled with gcc once and cached by a hash of its source and flags."""
    from agentrl_lite.tasks.kernels.cpu_c import _cache_dir

    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("the cpu_c kernel backend needs gcc: install it (Debian/Ubuntu: apt install gcc)")
    text = SOURCE.read_text()
    key = hashlib.sha256("\0".join([text, *FLAGS, gcc]).encode()).hexdigest()[:24]
    target = _cache_dir() / f"harness-{key}"
    if not target.exists():
        partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        done = subprocess.run([gcc, *FLAGS, str(SOURCE), "-o", str(partial), "-ldl"], capture_output=True, text=True,
                              timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"gcc cannot compile the kernel harness: {done.stderr[-2000:]}")
        partial.rename(target)  # atomic: another process never runs a half-written harness
    return str(target)


def schedule(n_sets: int, calls_per_set: int = 1, shuffle: bool = False) -> list[int]:
    """Set indices, one per call: each set `calls_per_set` times, in order or (shuffle) in a random order."""
    order = [s for s in range(n_sets) for _ in range(calls_per_set)]
    if shuffle:
        for i in range(len(order) - 1, 0, -1):  # Fisher-Yates with the OS's randomness
            j = secrets.randbelow(i + 1)
            order[i], order[j] = order[j], order[i]
    return order


def run(library: str, input_sets: list[list[np.ndarray]], sizes: list[list[int]], out_shapes: list[tuple[int, ...]],
        calls: list[int], timeout_s: float) -> Calls:
    """Run the candidate in `library` in the harness, in the sandbox: call `calls[j]`'s input set for every j.

    input_sets[s]: the kernel's inputs (float32, any shape, passed flat) of set s; sizes[s]: its int arguments;
    out_shapes[s]: the shape of its output."""
    n_inputs, n_sizes = len(input_sets[0]), len(sizes[0])
    payload = [struct.pack("<5I", MAGIC, n_inputs, n_sizes, len(input_sets), len(calls))]
    for inputs, ints, shape in zip(input_sets, sizes, out_shapes, strict=True):
        arrays = [np.ascontiguousarray(a, dtype="<f4") for a in inputs]
        payload += [struct.pack(f"<{n_sizes}i", *ints), struct.pack(f"<{n_inputs}Q", *(a.size for a in arrays)),
                    struct.pack("<Q", int(np.prod(shape))), *(a.tobytes() for a in arrays)]
    payload += [struct.pack("<2I", s, secrets.randbelow(MAX_SHIFT // 16) * 16) for s in calls]
    data = b"".join(payload)
    out_bytes = sum(4 * int(np.prod(out_shapes[s])) + 16 for s in calls) + 64
    with tempfile.TemporaryDirectory(prefix="agentrl_kernel_") as folder:  # the sandbox shows this copy only
        private = shutil.copy(library, f"{folder}/kernel.so")
        done = sandbox.run_command([binary(), private], readable=(binary(), private), stdin=data,
                                   timeout_s=timeout_s, memory_bytes=MEMORY_BUDGET_BYTES + 2 * len(data),
                                   max_output_bytes=out_bytes)
    if done.timed_out:
        return Calls("timeout", f"did not finish within {timeout_s:.0f} s")
    return _parse(done, out_shapes, calls)


def _parse(done: sandbox.CommandResult, out_shapes: list[tuple[int, ...]], calls: list[int]) -> Calls:
    """The harness's records, read as numbers; anything that does not follow the format is a failure."""
    stream, offset = done.stdout, 0
    result = Calls("ok")

    def take(size: int) -> bytes | None:
        nonlocal offset
        if offset + size > len(stream):
            return None
        offset += size
        return stream[offset - size:offset]

    while True:
        tag = take(4)
        if tag is None:
            return Calls("crashed", f"the kernel crashed the process: {_describe(done.returncode)}")
        (kind,) = struct.unpack("<I", tag)
        if kind == RECORD_END:
            if len(result.outputs) != len(calls) or offset != len(stream):
                return Calls("error", "the harness's report was malformed (did the kernel write to it?)")
            return result
        if kind == RECORD_FAULT and (fault := take(12)) is not None:
            what, call, signum = struct.unpack("<3I", fault)
            if what == FAULT_SETUP:
                why = done.stderr.decode(errors="replace").strip()[-300:] or "no reason given"
                return Calls("error", f"the harness could not load the kernel (harness.c line {signum}): {why}")
            status, message = _FAULTS.get(what, ("crashed", f"the kernel crashed the process: {_describe(-signum)}"))
            return Calls(status, f"call {call + 1}: {message}")
        index = len(result.outputs)
        head = take(12) if kind == RECORD_CALL and index < len(calls) else None
        if head is None or struct.unpack("<I", head[:4])[0] != calls[index]:
            return Calls("error", "the harness's report was malformed (did the kernel write to it?)")
        shape = out_shapes[calls[index]]
        values = take(4 * int(np.prod(shape)))
        if values is None:
            return Calls("crashed", f"the kernel crashed the process: {_describe(done.returncode)}")
        result.seconds.append(struct.unpack("<Q", head[4:])[0] / 1e9)
        result.outputs.append(np.frombuffer(values, dtype="<f4").astype(np.float32).reshape(shape))


def _describe(returncode: int | None) -> str:
    """What ended the harness, from its exit status (minus the signal number for a signal)."""
    if returncode is not None and returncode < 0:
        return _SIGNALS.get(-returncode, f"signal {-returncode}")
    return f"exit code {returncode}"
