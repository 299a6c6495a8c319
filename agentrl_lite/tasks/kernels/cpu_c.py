"""The `cpu_c` backend: a candidate is one C function, compiled with gcc -O3 into a shared library and called
through ctypes on one thread. CPU timings teach the pipeline (compile, verify, time, reward), not GPU speed.

Layers, each of which stands alone (a candidate that slips past one is caught by the next):
- static checks on the text refuse what can assemble a forbidden word in the preprocessor (token pasting and
  stringizing, backslash-newline splices, digraphs, trigraphs, `_Pragma`), every directive but #include of the
  allowed headers, #define/#if and two loop pragmas (`GCC ivdep`, `GCC unroll N` up to a cap);
- static checks on the *preprocessed* tokens (gcc -E -nostdinc against private copies of the allowed headers,
  which declare only the allowed imports) refuse inline assembly, attributes (constructors, weak symbols),
  `extern`, thread-local and half-precision types, `__builtin_` functions that reach the OS or the clock
  (rdtsc), calls of OS, thread and clock functions, and `static` variables (state kept between calls);
- gcc runs in the sandbox of the Python tool (`compiler.py`): it sees the system's programs, the private headers
  and its scratch folder only, under memory, CPU-time and file-size limits, every process killed on timeout;
  its log comes back trimmed to diagnostics in the candidate's file; libraries are cached by a hash of source,
  flags, headers and gcc;
- a link check compares the library with an empty kernel's, built the same way: it may import (strongly or
  weakly) only math and memory functions, may not grow any writable section (global or local data, however
  its symbols are named) nor the constructor and destructor tables, and its code may not contain an
  instruction no kernel needs (`syscall`, `int`, `sysenter`, `rdtsc`, `rdtscp`, `cpuid`, ...);
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
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from agentrl_lite.tasks.kernels import checks, compiler

ALLOWED_HEADERS = ("math.h", "stddef.h", "stdint.h", "float.h", "string.h")
INCLUDE_DIR = Path(__file__).with_name("include")
"""private copies of the allowed headers, the only ones a candidate compiles against (gcc -nostdinc)"""
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

_FORBIDDEN = {  # a word of the preprocessed source (a trailing * matches a prefix) → why it is refused
    **dict.fromkeys(("asm", "__asm", "__asm__"), "uses inline assembly"),
    "__attribute*": "uses __attribute__ (e.g. a constructor that runs at load time, a weak symbol)",
    "extern": "declares an extern symbol",
    **dict.fromkeys(("_Float16", "__fp16", "__bf16", "half"), "uses a half-precision type (silent dtype downgrade)"),
    **dict.fromkeys(("_Thread_local", "thread_local", "__thread"), "declares thread-local state"),
    **dict.fromkeys(("__seg_fs", "__seg_gs"), "reads memory through a segment register"),
}
_OS_CALLS = re.compile(r"pthread\w*|omp_\w+|fork|vfork|clone|system|popen|exec\w*|dlopen|dlsym|syscall|mmap|"
                       r"mprotect|signal|setjmp|longjmp|clock\w*|gettimeofday|time|nanosleep|usleep|sleep|fopen|"
                       r"fwrite|fread|open|creat|write|read")
"""functions that reach the OS, threads or the clock: refused where the source calls them by name"""
_LOADER_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors", ".init", ".fini")
"""code that runs when the library is loaded or unloaded"""
_GOT_SECTIONS = (".got", ".got.plt")
"""the offset tables the dynamic linker fills: they grow with the imports, by one 8-byte slot per relocation"""
_LINKER_TABLES = (".dynamic",)
"""written by the linker alone (the libraries and versions the library needs), not by a candidate's code"""
_EMPTY_KERNEL = "void kernel(float* out) { out[0] = 0.0f; }\n"


@dataclass
class CompileResult:
    ok: bool
    library: str | None
    """path of the shared library when ok"""
    log: str
    """gcc's diagnostics in the candidate's file (errors and warnings), trimmed"""
    seconds: float
    cached: bool = False


# --- static checks: the text, then what the preprocessor makes of it --------------------------------------
def static_problems(source: str, signature: str) -> list[str]:
    """What is wrong with a candidate before compiling it; empty when nothing is."""
    problems = checks.lexical_problems(source, ALLOWED_HEADERS, checks.c_pragma_ok)
    if problems:  # text built to fool the preprocessor is not preprocessed
        return problems
    preprocessed = _preprocess(source)
    if isinstance(preprocessed, Problem):
        return [preprocessed.why]
    code, pragmas = checks.preprocessed_code(preprocessed)
    problems += [f"uses #pragma {p}: only #pragma GCC ivdep and #pragma GCC unroll N (N up to "
                 f"{checks.MAX_UNROLL})" for p in pragmas if not checks.c_pragma_ok(p)]
    allowed_builtins = checks.ALLOWED_BUILTINS | ALLOWED_IMPORTS
    problems += checks.token_problems(checks.tokens(code), _FORBIDDEN, _OS_CALLS, allowed_builtins)
    name = signature.split("(")[0].split()[-1]
    if len(re.findall(rf"\bvoid\s+{name}\s*\(", code)) != 1:
        problems.insert(0, f"must define the function `{signature}` exactly once")
    # `static` only for helper functions: a static variable keeps state (a cache) between calls
    for match in re.finditer(r"\bstatic\b(.{0,80})", code, flags=re.S):
        rest = match.group(1)
        if not re.match(r"\s*(inline\s+)?(const\s+)?[A-Za-z_]\w*\s*\**\s*[A-Za-z_]\w*\s*\(", rest):
            problems.append("declares a static variable (state kept between calls)")
            break
    return problems


@dataclass
class Problem:
    why: str


def _header_flags() -> list[str]:
    return ["-nostdinc", "-I", str(INCLUDE_DIR), *compiler.DIAGNOSTIC_FLAGS]


def _preprocess(source: str, timeout_s: float = COMPILE_TIMEOUT_S) -> str | Problem:
    """gcc -E of the candidate in the box, with the compile's own flags and headers."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / compiler.SOURCE_NAME).write_text(source)
        run = compiler.run_sandboxed([_gcc(), *COMPILE_FLAGS, *_header_flags(), "-E", compiler.SOURCE_NAME, "-o",
                                      "kernel.i"], folder, timeout_s, readable=(str(INCLUDE_DIR),))
        if run.returncode is None:
            return Problem(f"the preprocessor did not finish within {timeout_s:.0f} s")
        if run.returncode != 0:
            return Problem(f"does not preprocess: {run.log or 'gcc -E failed (or ran out of memory)'}")
        return (folder / "kernel.i").read_text(errors="replace")


# --- gcc in its box, and the library cache --------------------------------------------------------------
def _gcc() -> str:
    gcc = shutil.which("gcc")
    if gcc is None:
        raise RuntimeError("the cpu_c kernel backend needs gcc: install it (Debian/Ubuntu: apt install gcc)")
    return gcc


def _cache_dir() -> Path:
    from agentrl_lite.models import cache_dir

    folder = cache_dir() / "kernels"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@lru_cache(maxsize=1)
def _headers_digest() -> str:
    return hashlib.sha256(b"".join(p.read_bytes() for p in sorted(INCLUDE_DIR.glob("*.h")))).hexdigest()


def compile_c(source: str, timeout_s: float = COMPILE_TIMEOUT_S) -> CompileResult:
    """gcc -O3 the source into a shared library, in the sandbox (`compiler.run_sandboxed`), against the private
    headers; cached by a hash of source, flags, headers and gcc."""
    gcc = _gcc()
    flags = [*COMPILE_FLAGS, *_header_flags()]
    key = hashlib.sha256("\0".join([source, *flags, gcc, _headers_digest()]).encode()).hexdigest()[:24]
    library = _cache_dir() / f"{key}.so"
    if library.exists():
        return CompileResult(True, str(library), "", 0.0, cached=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / compiler.SOURCE_NAME).write_text(source)
        run = compiler.run_sandboxed([gcc, *flags, compiler.SOURCE_NAME, "-o", "kernel.so", "-lm"], folder,
                                     timeout_s, readable=(str(INCLUDE_DIR),))
        seconds = time.perf_counter() - start
        if run.returncode is None:
            return CompileResult(False, None, f"gcc did not finish within {timeout_s:.0f} s", seconds)
        if run.returncode != 0:
            return CompileResult(False, None, run.log or f"gcc failed (exit code {run.returncode}): out of memory, "
                                 "or an error outside kernel.c", seconds)
        partial = library.with_name(library.name + f".{os.getpid()}.tmp")
        shutil.copyfile(folder / "kernel.so", partial)
        partial.rename(library)  # atomic: another process never loads a half-written library
    return CompileResult(True, str(library), run.log, seconds)


# --- the link check: the library against an empty kernel's ----------------------------------------------
@dataclass(frozen=True)
class _Library:
    """What the link check reads from a library."""

    imports: frozenset[tuple[str, str]]
    """(kind, name) of the undefined dynamic symbols: U strong, w/v weak"""
    sections: dict[str, tuple[int, str]]
    """section name → (size, readelf flags)"""
    writable_names: Counter
    """names of the data symbols in writable sections, global or local, counted (a name may come twice)"""
    instructions: Counter
    """forbidden instructions in its code, counted"""
    got_relocations: int


def _read_library(path: str) -> _Library:
    return _Library(frozenset(checks.undefined_symbols(path, dynamic=True)), checks.elf_sections(path),
                    _writable_symbols(path), checks.instruction_counts(path), checks.got_relocations(path))


@lru_cache(maxsize=1)
def _baseline() -> _Library:
    """An empty kernel's library, built with the same flags: what gcc's start-up files bring to every library
    (weak hooks such as `__cxa_finalize` and `__gmon_start__`, `completed.0`, `__dso_handle`, a constructor
    table)."""
    compiled = compile_c(_EMPTY_KERNEL)
    if not compiled.ok:
        raise RuntimeError(f"gcc cannot compile an empty kernel: {compiled.log}")
    return _read_library(compiled.library)


def link_problems(library: str, function: str = "kernel") -> list[str]:
    """What the compiled library imports, defines or contains that a kernel must not, judged against an empty
    kernel's library."""
    base, this = _baseline(), _read_library(library)
    problems = []
    for kind, symbol in sorted(this.imports - base.imports):
        if symbol not in ALLOWED_IMPORTS:
            weakly = " (imported weakly)" if kind in "wv" else ""
            problems.append(f"calls {symbol}{weakly}, which a kernel may not use")
    defined = subprocess.run([checks._binutil("nm"), "-D", "--defined-only", library], capture_output=True,
                             text=True).stdout
    kinds = {parts[-1]: parts[-2] for parts in (line.split() for line in defined.splitlines()) if len(parts) >= 2}
    if kinds.get(function) != "T":
        problems.append(f"does not export the function {function}")
    problems += _data_problems(this, base, sorted(name for name, kind in kinds.items() if kind in "BDCGS"))
    loader = [name for name in _LOADER_SECTIONS if _size(this, name) > _size(base, name)]
    if loader:
        problems.append(f"runs code when loaded or unloaded ({', '.join(loader)} larger than an empty kernel's): "
                        "a constructor or destructor")
    extra = sorted((this.instructions - base.instructions).keys())
    if extra:
        problems.append(f"contains the instruction {', '.join(extra)}, which no kernel needs (a system call, a "
                        "clock or the CPU's identity)")
    return problems


def _size(library: _Library, section: str) -> int:
    return library.sections.get(section, (0, ""))[0]


def _data_problems(this: _Library, base: _Library, global_names: list[str]) -> list[str]:
    """Writable data beyond the empty kernel's, judged by section sizes and by the count of writable symbols of
    each name (a candidate's `static int completed` is a second `completed.0` beside gcc's own, small enough to
    fit in the section's alignment padding)."""
    problems = []
    if any("T" in flags for flags in (f for _, f in this.sections.values())):
        problems.append("declares thread-local state")
    grown = [f"{name} +{size - _size(base, name)} bytes" for name, (size, flags) in this.sections.items()
             if "W" in flags and name not in (*_GOT_SECTIONS, *_LINKER_TABLES, *_LOADER_SECTIONS)
             and size > _size(base, name)]
    # the offset tables may grow by one slot per relocation that fills one (and .got.plt's 24-byte header)
    got_growth = sum(_size(this, s) - _size(base, s) for s in _GOT_SECTIONS)
    header = 24 if ".got.plt" in this.sections and ".got.plt" not in base.sections else 0
    if got_growth > 8 * (this.got_relocations - base.got_relocations) + header:
        grown.append(f"offset tables +{got_growth} bytes")
    extra_names = sorted((this.writable_names - base.writable_names).keys())
    if not (grown or extra_names):
        return problems
    if global_names:
        problems.append(f"defines writable global data ({', '.join(global_names[:3])}): state kept between calls")
    else:
        local = extra_names or grown
        problems.append(f"defines writable static data ({', '.join(local[:3])}): state kept between calls")
    return problems


def _writable_symbols(library: str) -> Counter:
    """Names of the writable data (bss, data, common, small data) of a library, global or local, counted."""
    table = subprocess.run([checks._binutil("nm"), "--defined-only", library], capture_output=True, text=True).stdout
    return Counter(parts[-1] for parts in (line.split() for line in table.splitlines())
                   if len(parts) >= 3 and parts[-2] in "bBdDcCgGsS")


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
