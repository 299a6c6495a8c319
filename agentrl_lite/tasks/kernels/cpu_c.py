"""The `cpu_c` backend: a candidate is one C function, compiled with gcc -O3 into a shared library and called
through ctypes on one thread. CPU timings teach the pipeline (compile, verify, time, reward), not GPU speed.

Nothing a candidate does can reach the caller:
- static checks refuse what has no place in a kernel before anything is compiled (other headers, inline
  assembly, `__attribute__` (load-time constructors), `extern`, file-scope or static state, half-precision
  types, threads);
- gcc runs in a subprocess with a timeout; libraries are cached by a hash of the source and flags;
- a link check reads the library's symbol table: it may import only math and memory functions (no
  `system`, no Python C API, no timer) and may not define writable data of its own, global or local (a cache
  between calls);
- the library is loaded and called only in child processes forked from a forkserver (with PyTorch and NumPy
  preloaded, so a child starts in milliseconds), under a CPU-time and address-space limit: a segfault, an
  infinite loop or a huge allocation ends that child, and the caller reads a verdict.
The reference (PyTorch) also runs in a child of its own, so the candidate never shares a process with the
reference's outputs.
"""

from __future__ import annotations

import ctypes
import hashlib
import multiprocessing
import multiprocessing.connection
import os
import re
import resource
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

ALLOWED_HEADERS = ("math.h", "stddef.h", "stdint.h", "float.h", "string.h")
ALLOWED_IMPORTS = {
    # libm (float and double forms) and the memory functions; nothing that can reach the OS or the clock
    *(f + s for f in ("exp", "exp2", "expm1", "log", "log2", "log1p", "sqrt", "cbrt", "tanh", "sinh", "cosh",
                      "sin", "cos", "tan", "atan", "atan2", "erf", "erfc", "pow", "fabs", "fmax", "fmin",
                      "floor", "ceil", "round", "fma", "rint", "trunc", "hypot") for s in ("", "f")),
    "memcpy", "memset", "memmove",
}
"""undefined symbols a candidate library may import"""
COMPILE_FLAGS = ("-O3", "-march=native", "-std=c11", "-shared", "-fPIC", "-fno-openmp")
COMPILE_TIMEOUT_S = 30.0
RUN_TIMEOUT_S = 10.0
"""wall-clock limit of one child (all the input sets of a correctness check, or one timing)"""
TIMING_TOLERANCE = 1e-3
"""atol = rtol of the output check after every timed call (the loosest task tolerance: the kernel already passed
its task's own check at the correctness stage)"""
MEMORY_BUDGET_BYTES = 1 << 30
"""address space a child may add to what it started with (inputs, outputs, the candidate's allocations)"""

_FORBIDDEN = [
    (r"#\s*include\s*\"", "includes a local header"),
    (r"\b(asm|__asm__|__asm)\b", "uses inline assembly"),
    (r"\b__attribute__\b", "uses __attribute__ (e.g. a constructor that runs at load time)"),
    (r"\bextern\b", "declares an extern symbol"),
    (r"\b(_Float16|__fp16|__bf16|half)\b", "uses a half-precision type (silent dtype downgrade)"),
    (r"\b(pthread\w*|omp_\w+|fork|vfork|clone|system|popen|exec\w*|dlopen|dlsym|syscall|mmap|mprotect|signal|"
     r"setjmp|longjmp|clock\w*|gettimeofday|time|nanosleep|usleep|sleep|fopen|fwrite|fread|open|write|read)\s*\(",
     "calls a function that reaches the OS, threads or the clock"),
    (r"#\s*pragma\s+(?!GCC\s+(ivdep|unroll)\b)", "uses a #pragma other than GCC ivdep/unroll"),
    (r"\b_?Thread_local\b|\bthread_local\b", "declares thread-local state"),
]


@dataclass
class CompileResult:
    ok: bool
    library: str | None
    """path of the shared library when ok"""
    log: str
    """gcc's messages (errors and warnings), trimmed"""
    seconds: float
    cached: bool = False


def static_problems(source: str, signature: str) -> list[str]:
    """What is wrong with a candidate before compiling it; empty when nothing is."""
    problems = []
    name = signature.split("(")[0].split()[-1]
    if len(re.findall(rf"\bvoid\s+{name}\s*\(", source)) != 1:
        problems.append(f"must define the function `{signature}` exactly once")
    for header in re.findall(r"#\s*include\s*<([^>]+)>", source):
        if header.strip() not in ALLOWED_HEADERS:
            problems.append(f"includes <{header.strip()}>; allowed: {', '.join(ALLOWED_HEADERS)}")
    for pattern, why in _FORBIDDEN:
        if re.search(pattern, source):
            problems.append(why)
    # `static` only for helper functions: a static variable keeps state (a cache) between calls
    for match in re.finditer(r"\bstatic\b(.{0,80})", source, flags=re.S):
        rest = match.group(1)
        if not re.match(r"\s*(inline\s+)?(const\s+)?[A-Za-z_]\w*\s*\**\s*[A-Za-z_]\w*\s*\(", rest):
            problems.append("declares a static variable (state kept between calls)")
            break
    return problems


def _cache_dir() -> Path:
    from agentrl_lite.models import cache_dir

    folder = cache_dir() / "kernels"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def compile_c(source: str, timeout_s: float = COMPILE_TIMEOUT_S) -> CompileResult:
    """gcc -O3 the source into a shared library in a subprocess; cached by a hash of source, flags and gcc."""
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("the cpu_c kernel backend needs gcc: install it (Debian/Ubuntu: apt install gcc)")
    key = hashlib.sha256("\0".join([source, *COMPILE_FLAGS, gcc]).encode()).hexdigest()[:24]
    library = _cache_dir() / f"{key}.so"
    if library.exists():
        return CompileResult(True, str(library), "", 0.0, cached=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "kernel.c"
        src.write_text(source)
        out = Path(tmp) / "kernel.so"
        try:
            done = subprocess.run([gcc, *COMPILE_FLAGS, str(src), "-o", str(out), "-lm"], capture_output=True,
                                  text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return CompileResult(False, None, f"gcc did not finish within {timeout_s:.0f} s", timeout_s)
        log = (done.stderr or "").replace(str(src), "kernel.c")
        seconds = time.perf_counter() - start
        if done.returncode != 0:
            return CompileResult(False, None, _trim(log), seconds)
        tmp_target = library.with_name(library.name + f".{os.getpid()}.tmp")
        shutil.copyfile(out, tmp_target)
        tmp_target.rename(library)  # atomic: another process never loads a half-written library
    return CompileResult(True, str(library), _trim(log), seconds)


def _trim(log: str, lines: int = 12) -> str:
    kept = [line for line in log.splitlines() if line.strip()]
    return "\n".join(kept[:lines]) + ("\n..." if len(kept) > lines else "")


def link_problems(library: str, function: str = "kernel") -> list[str]:
    """What the compiled library imports or defines that a kernel must not (from its dynamic symbol table)."""
    nm = shutil.which("nm")
    if nm is None:
        raise RuntimeError("the cpu_c kernel backend needs nm (binutils): install it with gcc")
    undefined = subprocess.run([nm, "-D", "--undefined-only", library], capture_output=True, text=True).stdout
    defined = subprocess.run([nm, "-D", "--defined-only", library], capture_output=True, text=True).stdout
    problems = []
    for line in undefined.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[-2] == "U":  # weak symbols (w) are the toolchain's own hooks
            symbol = parts[-1].split("@")[0]
            if symbol not in ALLOWED_IMPORTS:
                problems.append(f"calls {symbol}, which a kernel may not use")
    kinds = {parts[-1]: parts[-2] for parts in (line.split() for line in defined.splitlines()) if len(parts) >= 2}
    if kinds.get(function) != "T":
        problems.append(f"does not export the function {function}")
    writable = sorted(name for name, kind in kinds.items() if kind in "BDCGS")
    if writable:
        problems.append(f"defines writable global data ({', '.join(writable[:3])}): state kept between calls")
    # the full symbol table also lists local data (a `static` inside the function, e.g. a cache keyed by the
    # input pointer): the static check refuses it, this catches whatever spelling slips past it
    local = _writable_symbols(library) - _toolchain_writable_symbols() - set(writable)
    if local:
        problems.append(f"defines writable static data ({', '.join(sorted(local)[:3])}): state kept between calls")
    return problems


def _writable_symbols(library: str) -> set[str]:
    """Names of the writable data (bss, data, common, small data) of a library, global or local."""
    nm = shutil.which("nm")
    table = subprocess.run([nm, "--defined-only", library], capture_output=True, text=True).stdout
    return {parts[-1] for parts in (line.split() for line in table.splitlines())
            if len(parts) >= 3 and parts[-2] in "bBdDcCgGsS"}


@lru_cache(maxsize=1)
def _toolchain_writable_symbols() -> frozenset[str]:
    """The writable data gcc's start-up files put in every library (`completed.0`, `__dso_handle`, ...): what a
    kernel with no state of its own defines."""
    compiled = compile_c("void kernel(float* out) { out[0] = 0.0f; }\n")
    if not compiled.ok:
        raise RuntimeError(f"gcc cannot compile a trivial kernel: {compiled.log}")
    return frozenset(_writable_symbols(compiled.library))


# --- children: the candidate and the reference never run in the caller's process ------------------------
def _limit_child() -> None:
    """CPU-time and address-space limits for a child (the wall-clock limit is the parent's join timeout)."""
    resource.setrlimit(resource.RLIMIT_CPU, (int(RUN_TIMEOUT_S) + 1, int(RUN_TIMEOUT_S) + 1))
    with open("/proc/self/status") as f:
        size_kb = int(re.search(r"VmSize:\s+(\d+)", f.read()).group(1))
    limit = size_kb * 1024 + MEMORY_BUDGET_BYTES
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    os.environ["OMP_NUM_THREADS"] = "1"
    # what a broken kernel makes the C library print ("malloc(): invalid size", "stack smashing detected")
    # would land in the notebook; the verdict says what happened
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)


def _load(library: str, n_inputs: int, n_sizes: int):
    function = ctypes.CDLL(library).kernel
    function.argtypes = [ctypes.c_void_p] * (n_inputs + 1) + [ctypes.c_int] * n_sizes
    function.restype = None
    return function


def _call(function, inputs: list[np.ndarray], out: np.ndarray, sizes: list[int]) -> None:
    function(*[a.ctypes.data for a in inputs], out.ctypes.data, *sizes)


def _candidate_child(library: str, input_sets: list[list[np.ndarray]], out_shape: tuple[int, ...],
                     sizes: list[int], conn) -> None:
    """Run the candidate on every input set; send back the outputs, or what went wrong."""
    try:
        _limit_child()
        function = _load(library, len(input_sets[0]), len(sizes))
        outputs = []
        for inputs in input_sets:
            inputs = [np.array(a, dtype=np.float32, copy=True, order="C") for a in inputs]  # fresh buffers
            before = [a.copy() for a in inputs]
            out = np.full(out_shape, np.nan, dtype=np.float32)  # a candidate that writes nothing is wrong
            _call(function, inputs, out, sizes)
            if not all(np.array_equal(a, b, equal_nan=True) for a, b in zip(inputs, before, strict=True)):
                conn.send(("mutated", "the kernel changed its inputs"))
                return
            outputs.append(out)
        conn.send(("ok", outputs))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent as a verdict
        conn.send(("error", f"{type(e).__name__}: {e}"))


def _reference_model(reference_source: str):
    import torch

    namespace: dict = {}
    exec(compile(reference_source, "<reference>", "exec"), namespace)
    torch.set_num_threads(1)
    return namespace["Model"](*namespace["get_init_inputs"]()).eval()


def _reference_child(reference_source: str, input_sets: list[list[np.ndarray]], conn) -> None:
    """The PyTorch reference on every input set, in a process of its own."""
    try:
        import torch

        model = _reference_model(reference_source)
        with torch.no_grad():
            outs = [model(*[torch.from_numpy(a) for a in inputs]).numpy() for inputs in input_sets]
        conn.send(("ok", outs))
    except BaseException as e:  # noqa: BLE001
        conn.send(("error", f"{type(e).__name__}: {e}"))


def _timing_child(library: str, reference_source: str, inputs: list[np.ndarray], out_shape: tuple[int, ...],
                  sizes: list[int], warmup: int, repeats: int, conn) -> None:
    """Median seconds of candidate and reference calls, interleaved (one of each per round) on one thread.

    The output buffer is reset to NaN before every candidate call (outside the timed region) and every output
    is compared with the reference's: a kernel that remembers its last call's buffers and returns early (a
    cache keyed by pointer or shape) leaves NaN behind and is caught here, whatever slipped past the static and
    link checks."""
    try:
        import torch

        _limit_child()
        torch.set_num_threads(1)
        model = _reference_model(reference_source)
        function = _load(library, len(inputs), len(sizes))
        arrays = [np.ascontiguousarray(a, dtype=np.float32) for a in inputs]
        tensors = [torch.from_numpy(a) for a in arrays]
        out = np.empty(out_shape, dtype=np.float32)
        candidate, reference = [], []
        with torch.no_grad():
            for i in range(warmup + repeats):
                out.fill(np.nan)
                start = time.perf_counter_ns()
                _call(function, arrays, out, sizes)
                middle = time.perf_counter_ns()
                expected = model(*tensors)
                end = time.perf_counter_ns()
                if not np.allclose(out, expected.numpy(), atol=TIMING_TOLERANCE, rtol=TIMING_TOLERANCE):
                    conn.send(("error", f"call {i + 1} of the timing left a wrong output (the output buffer is "
                                        "reset before every call): does the kernel keep state between calls?"))
                    return
                if i >= warmup:
                    candidate.append(middle - start)
                    reference.append(end - middle)
        conn.send(("ok", (float(np.median(candidate)) / 1e9, float(np.median(reference)) / 1e9)))
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
