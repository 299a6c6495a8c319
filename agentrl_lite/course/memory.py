"""A notebook kernel's memory (course tooling): the resident memory of this process's descendants, sampled in a
thread, a page that processes share counted once."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

RSS_EVERY_S = 0.25


def resident_bytes(process: Any) -> int:
    """The memory `process` holds: its proportional set size (PSS) where Linux reports it, else its RSS.

    PSS splits each page among the processes that share it, so a process tree's sum counts a page once. A sum
    of RSS counts it in every process: lesson 10's candidate kernels run in children forked from a forkserver
    that preloads PyTorch, and each child's RSS repeats the pages it shares with the forkserver."""
    with contextlib.suppress(OSError, ValueError):
        with open(f"/proc/{process.pid}/smaps_rollup") as rollup:
            for line in rollup:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    return process.memory_info().rss


@contextlib.contextmanager
def peak_memory(
    samples: list[tuple[float, float]] | None = None, roots: Callable[[], list[int]] | None = None
) -> Iterator[list[float]]:
    """Sample the resident memory of this process's descendants (the kernel's RSS and the PSS of whatever it
    starts, so pages they share with each other count once: `resident_bytes`) in a thread
    while the block runs; yields a one-element list that holds the peak in MB afterwards (0 if never read).
    `samples`, when given, receives every reading as (unix time, MB), so memory can be attributed to cells.
    `roots`, when given, names the processes to measure (read at every sample: a kernel started inside the block
    counts from its start): each one's RSS and the PSS of its descendants, and nothing else this process started
    (under pytest-xdist a worker keeps the forkserver an earlier test left, which is not the kernel's)."""
    import psutil

    peak, stop = [0.0], threading.Event()

    def tops() -> list[Any]:
        if roots is None:
            return psutil.Process().children()
        found = []
        for pid in roots():
            with contextlib.suppress(psutil.Error):
                found.append(psutil.Process(pid))
        return found

    def sample() -> None:
        while not stop.is_set():
            total = 0
            for top in tops():
                with contextlib.suppress(psutil.Error):
                    # the kernel's own pages by RSS: reading PSS walks a process's page tables (66 ms for a 3.6 GB
                    # kernel, a quarter of a core at four reads a second); what it starts is small and cheap to read
                    total += top.memory_info().rss
                    for child in top.children(recursive=True):
                        with contextlib.suppress(psutil.Error):
                            total += resident_bytes(child)
            peak[0] = max(peak[0], total / 2**20)
            if samples is not None:
                samples.append((time.time(), total / 2**20))
            stop.wait(RSS_EVERY_S)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield peak
    finally:
        stop.set()
        thread.join()
