"""Python child processes of the verifier: the PyTorch reference (its outputs, its timing) and the cuda backend's
candidate children. No `cpu_c` candidate ever runs in one of them (those run in the C harness, harness.py).

Children are forks of a forkserver with NumPy and PyTorch preloaded (a child starts in milliseconds); a child
sends back ("ok", value) or ("error", message) over a pipe. Only children that run no candidate code are
unpickled without a second thought: the reference's; the cuda children hold a candidate (see cuda.py).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import time

import numpy as np

RUN_TIMEOUT_S = 10.0
"""default wall-clock limit of one child"""


def reference_model(reference_source: str):
    """The task's PyTorch `Model` (KernelBench format), on one CPU thread."""
    import torch

    namespace: dict = {}
    exec(compile(reference_source, "<reference>", "exec"), namespace)
    torch.set_num_threads(1)
    return namespace["Model"](*namespace["get_init_inputs"]()).eval()


def reference_child(reference_source: str, input_sets: list[list[np.ndarray]], conn) -> None:
    """The reference's output on every input set."""
    try:
        import torch

        model = reference_model(reference_source)
        with torch.no_grad():
            outs = [model(*[torch.from_numpy(a) for a in inputs]).numpy() for inputs in input_sets]
        conn.send(("ok", outs))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as a verdict
        conn.send(("error", f"{type(e).__name__}: {e}"))


def keep_freed_memory() -> None:
    """Make glibc keep large freed blocks in this process's heap for reuse, as PyTorch's caching allocator does
    on a GPU, instead of mapping fresh pages for every large allocation and returning them on free.

    The reference allocates its output on every call, the candidate writes into a buffer allocated once. With
    glibc's defaults an output of a few MB gets its own mapping whenever the allocator's adaptive threshold says
    so, and then every call pays a page fault per 4 KB page: measured on relu at the cpu shape, about 570 faults
    a call and medians from 0.11 to 0.38 ms in different processes, for an operator that takes 0.18 ms. The
    reference's timing then depended on the process, not on PyTorch."""
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc: nothing to set
        return
    mallopt(M_MMAP_THRESHOLD, 1 << 30)
    mallopt(M_TRIM_THRESHOLD, 1 << 30)


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3
"""glibc's mallopt parameters: free heap above this is returned to the system; allocations at least this large
get a mapping of their own"""


def reference_timing_child(reference_source: str, input_sets: list[list[np.ndarray]], calls: list[int],
                           warmup: int, conn) -> None:
    """(median seconds of the reference's calls after `warmup`, its output on every set, the page faults of the
    timed calls): the reference is called on `input_sets[calls[j]]` for every j, the same schedule the candidate
    ran, with freed memory kept for reuse (`keep_freed_memory`)."""
    try:
        import resource

        import torch

        keep_freed_memory()  # and below, the heap touched once before the timed calls
        model = reference_model(reference_source)
        tensors = [[torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)) for a in s] for s in input_sets]
        seconds, faults = [], 0
        with torch.no_grad():
            outputs = [model(*t).numpy() for t in tensors]
            room = 2 * sum(o.nbytes for o in outputs) + (64 << 20)  # more than the calls will hold at once
            torch.ones(room // 4).sum()  # touch that much heap once; freed, it stays in the heap for the calls
            for i, s in enumerate(calls):
                before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                start = time.perf_counter_ns()
                model(*tensors[s])
                if i >= warmup:
                    seconds.append(time.perf_counter_ns() - start)
                    faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        conn.send(("ok", (float(np.median(seconds)) / 1e9, outputs, faults)))
    except BaseException as e:  # noqa: BLE001
        conn.send(("error", f"{type(e).__name__}: {e}"))


_CONTEXT: multiprocessing.context.BaseContext | None = None


def _context() -> multiprocessing.context.BaseContext:
    """A forkserver with NumPy and PyTorch preloaded: children are forks of it (isolated, fast to start)."""
    global _CONTEXT
    if _CONTEXT is None:
        _CONTEXT = multiprocessing.get_context("forkserver")
        _CONTEXT.set_forkserver_preload(["numpy", "torch", __name__])
    return _CONTEXT


def run_in_child(target, args: tuple, timeout_s: float = RUN_TIMEOUT_S) -> tuple[str, object]:
    """Run `target(*args, conn)` in a child; ("ok", value), ("timeout", message), ("crashed", message) or the
    child's own ("error" | "mutated", message)."""
    ctx = _context()
    parent, child = ctx.Pipe(duplex=False)
    process = ctx.Process(target=target, args=(*args, child), daemon=True)
    process.start()
    child.close()
    try:
        # wait for an answer or for the child's end, whichever comes first (a crashed child sends nothing)
        ready = multiprocessing.connection.wait([parent, process.sentinel], timeout_s)
        if parent in ready or parent.poll():
            try:
                return parent.recv()
            except EOFError:
                pass
        if not ready:
            process.kill()
            process.join()
            return "timeout", f"did not finish within {timeout_s:.0f} s"
        process.join()
        code = process.exitcode
        why = {-11: "segmentation fault", -9: "killed (memory or CPU-time limit)", -6: "aborted",
               -4: "illegal instruction", -7: "bus error", -24: "CPU-time limit"}.get(code or 0, f"exit code {code}")
        return "crashed", f"the kernel crashed the process: {why}"
    finally:
        if process.is_alive():
            process.kill()
        process.join()
        parent.close()
