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
- the library runs only in `harness.py`'s C harness, in the sandbox under seccomp filters, never in a Python
  process; the reference (PyTorch) runs elsewhere, so the candidate never shares a process with it.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import agentrl_lite.tasks.kernels.checks as checks
import agentrl_lite.tasks.kernels.compiler as compiler

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
RUN_TIMEOUT_S = 5.0
"""wall-clock limit of the harness run of a correctness check (all its input sets): a correct naive kernel's
run takes 0.2-0.6 s at the cpu shape, sandbox start included, so a candidate that runs 5 s hangs; it is also
what every hanging candidate costs a GRPO step"""
TIMING_TIMEOUT_S = 30.0
"""wall-clock limit of the harness run of a timing (warm-up and timed calls): a correct but slow kernel must be
timed and paid as slower, not cut as a hang"""

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
    problems = checks.lexical_problems(source, ALLOWED_HEADERS, checks.c_pragma_ok, checks.C_PRAGMAS)
    if problems:  # text built to fool the preprocessor is not preprocessed
        return problems
    preprocessed = _preprocess(source)
    if isinstance(preprocessed, Problem):
        return [preprocessed.why]
    code, pragmas = checks.preprocessed_code(preprocessed)
    problems += [f"uses #pragma {p}: only {checks.C_PRAGMAS}" for p in pragmas if not checks.c_pragma_ok(p)]
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
    """Why the preprocessor did not give a token stream to check."""

    why: str


def _header_flags() -> list[str]:
    return ["-nostdinc", "-I", str(INCLUDE_DIR), *compiler.DIAGNOSTIC_FLAGS]


def _preprocess(source: str, timeout_s: float = COMPILE_TIMEOUT_S) -> str | Problem:
    """gcc -E of the candidate in the sandbox, with the compile's own flags and headers."""
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
