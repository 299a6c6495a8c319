"""The `cuda` backend: a candidate is CUDA C++ that defines `__global__` kernels and the task's host function,
compiled with nvcc into a shared library and called through ctypes with device pointers.

The candidate (a ```cuda, ```cu, ```cpp or ```c++ block) defines one or more `__global__` kernels and a host
function with exactly the task's C signature, e.g. `void kernel(const float* x, float* out, int n)`, whose
pointers are DEVICE pointers; it launches its kernels on the default (legacy) stream and returns. It need not
write `extern "C"`: the harness puts `extern "C" <signature>;` before the source, so the definition gets C
linkage, and a definition with other parameter types becomes a C++ overload that the link check reports.

Nothing a candidate does can reach the caller:
- static checks (no GPU needed) refuse what can assemble a forbidden word in the preprocessor (token pasting
  and stringizing, backslash-newline splices, digraphs, trigraphs, `_Pragma`) and every directive but
  #include <...>, #define/#if and the unroll pragmas; then what has no place in a kernel: other headers (a
  library such as torch, cuBLAS, cuDNN, thrust or cub computes the answer; cuda_fp16.h and friends downgrade
  the dtype), streams, events and graphs (work left on a side stream escapes the timing), allocations and
  static, `__device__`, `__constant__` or `__managed__` variables (state kept between calls: a cache by
  pointer or by shape), half precision types, inline PTX, attributes (constructors, weak symbols),
  `__builtin_` functions that reach the clock or the stack, clocks and OS calls, CUDA runtime calls beyond a
  short list, launches on a stream of their own, and a host function that is missing, doubled or of another
  signature;
- nvcc runs in the compiler's box (memory and CPU limits, its own process group killed whole on timeout, a log
  trimmed to the candidate's own diagnostics), first to an object file, then to a shared library (the CUDA
  runtime linked statically); both are cached by a hash of source, flags, GPU architecture and nvcc version;
- a link check reads the object file (precise: the statically linked runtime is not in it) and compares it
  with the object file of a known-good kernel: it may import, strongly or weakly, only the runtime's launch
  and registration hooks, a few runtime calls and libm; may define no writable data besides nvcc's own; may
  add no constructor or destructor to nvcc's; and its host code may contain no instruction a kernel does not
  need (`syscall`, `int`, `sysenter`, `rdtsc`, `rdtscp`, `cpuid`, ...);
- the library is loaded and called only in child processes; a fault (an illegal address), a hang or a crash
  ends that child, and the caller reads a verdict.

Children and CUDA: a process whose parent initialised CUDA before forking cannot use CUDA. The children come
from children.py's forkserver: a fresh interpreter (exec'd, not forked from the caller) that imports PyTorch but never
initialises CUDA, so every child is the first process of its line to touch the GPU, whether or not the caller
(a trainer) uses CUDA itself. Nothing in this module initialises CUDA in the caller: even "is there a GPU?"
is asked in a child (`backend_problem`).

Correctness: fresh device copies of the input sets, the output filled with NaN, a device-wide synchronise
(it waits for every stream and raises a kernel's fault), the launch error read back, inputs compared with the
host originals. Timing: candidate and the task's PyTorch `Model` on CUDA tensors, interleaved, each call after
an L2 flush and with its output buffer reset to NaN, timed by CUDA events with a device-wide synchronise
before the end event (so work left on any stream is counted), medians.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import resource
import shutil
import subprocess
import tempfile
import textwrap
import time
from functools import lru_cache
from pathlib import Path

import numpy as np

import agentrl_lite.tasks.kernels.checks as checks
import agentrl_lite.tasks.kernels.children as children
import agentrl_lite.tasks.kernels.compiler as compiler
import agentrl_lite.tasks.kernels.cpu_c as cpu_c
from agentrl_lite.tasks.kernels.catalog import KernelTask

SYSTEM_PROMPT = (
    "You write fast, correct CUDA kernels. Reply with one ```cuda code block that defines your __global__ kernels "
    "and the requested host function, which receives device pointers and launches the kernels on the default "
    "stream (<<<grid, block>>> or <<<grid, block, shared_bytes>>>). Arrays are float32, row-major and contiguous. "
    "Only <cuda_runtime.h> and <math.h> are available; no libraries, streams, allocations, half precision, or "
    "global, static or __device__ variables."
)
"""the system prompt of the cuda backend (the counterpart of env.SYSTEM_PROMPT for cpu_c)"""
ALLOWED_HEADERS = ("cuda_runtime.h", "device_launch_parameters.h", "math.h", "cmath", "float.h", "cfloat",
                   "stdint.h", "cstdint", "stddef.h", "cstddef", "cooperative_groups.h")
ALLOWED_CUDA_CALLS = ("cudaGetLastError", "cudaPeekAtLastError", "cudaGetErrorString",
                      "cudaDeviceSynchronize", "cudaMemset", "cudaMemsetAsync", "cudaFuncSetAttribute",
                      "cudaFuncGetAttributes", "cudaGetDevice", "cudaDeviceGetAttribute",
                      "cudaOccupancyMaxActiveBlocksPerMultiprocessor", "cudaOccupancyMaxPotentialBlockSize")
"""the CUDA runtime calls a host function may make (besides launching kernels): errors, zeroing the output,
shared-memory and occupancy queries"""
ALLOWED_IMPORTS = {
    *cpu_c.ALLOWED_IMPORTS, *ALLOWED_CUDA_CALLS,
    # what nvcc's host code calls to register the kernels and launch them (<<<>>>); CUDA 12 and 13 spellings
    "__cudaRegisterFatBinary", "__cudaRegisterFatBinaryEnd", "__cudaUnregisterFatBinary",
    "__cudaRegisterFunction", "__cudaPushCallConfiguration", "__cudaPopCallConfiguration", "__cudaLaunchKernel",
    "__cudaGetKernel", "cudaLaunchKernel",
    # the C++ runtime: exceptions, guarded statics of nvcc's launch stubs, teardown
    "_GLOBAL_OFFSET_TABLE_", "_Unwind_Resume", "__gxx_personality_v0", "__cxa_guard_acquire",
    "__cxa_guard_release", "__cxa_guard_abort", "__cxa_atexit", "__dso_handle", "atexit", "__stack_chk_fail",
}
"""undefined symbols a candidate's object file may import"""
NVCC_FLAGS = ("-O3", "-std=c++17", "-Xcompiler", "-fPIC", "--default-stream", "legacy")
"""flags of the object file (the library is linked with `-shared`, the CUDA runtime statically)"""
COMPILE_TIMEOUT_S = 60.0
NVCC_MEMORY_BYTES = 8 << 30
"""address space of each process nvcc runs (cudafe++, cicc, ptxas, the host compiler, the linker)"""
_NVCC_ENV = ("LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH", "NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")
"""the environment nvcc may need besides PATH"""
RUN_TIMEOUT_S = 30.0
"""wall-clock limit of one correctness child (three times this for timing): CUDA's start in a fresh process
takes seconds, and the gpu shape's six input sets are about a gigabyte to copy"""
L2_FLUSH_BYTES = 256 << 20
"""written before every timed call, larger than any GPU's L2 cache (50 MB on an H100)"""
HOST_FUNCTION = "kernel"
_LAUNCH_ERROR = "agentrl_launch_error"
_PRELUDE = '#include <cuda_runtime.h>\nextern "C" {signature};\n#line 1 "kernel.cu"\n'
_EPILOGUE = (f'\n#line 1 "harness.cu"\nextern "C" const char* {_LAUNCH_ERROR}(void) {{\n'
             "    cudaError_t error = cudaGetLastError();  // a launch refused (e.g. too many threads)\n"
             "    return error == cudaSuccess ? nullptr : cudaGetErrorString(error);\n}\n")
_ALLOWED_BUILTINS = checks.ALLOWED_BUILTINS | cpu_c.ALLOWED_IMPORTS | {"assume"}
_LOADER_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors")
"""tables of functions run when the library is loaded or unloaded (in an object file also `.init_array.N`)"""
_CODE = re.compile(r"```(?:cuda|cu|cpp|c\+\+)[ \t]*\n(.*?)```", re.S | re.I)
NO_CODE_BLOCK = "no ```cuda code block in the reply (```cu, ```cpp, ```c++ are read too; ```c is for cpu_c)"

_LIBRARIES = re.compile(r"(torch|ATen|c10|caffe2|pybind11|Python|cublas|cudnn|cufft|curand|cusparse|cusolver|"
                        r"cutlass|cute|thrust|cub|cuda/|nccl|nvrtc)", re.I)
_HALF_HEADERS = ("cuda_fp16.h", "cuda_bf16.h", "cuda_fp8.h", "cuda_fp6.h", "cuda_fp4.h", "mma.h")
_STREAMS = r"\b(cudaStream\w*|cudaEvent\w*|cudaGraph\w*|cudaLaunchHostFunc|CUstream\w*|CUevent\w*)\b"
_MEMORY = r"\b(cudaMalloc\w*|cudaFree\w*|cudaHostAlloc|malloc|calloc|realloc|free|new|delete)\b"
_FORBIDDEN = [
    (r"\b(asm|__asm__|__asm)\b", "uses inline assembly (PTX)"),
    (r"\b__attribute\w*", "uses __attribute__ (e.g. a constructor that runs at load time, a weak symbol)"),
    (r"\[\[", "uses a [[...]] attribute (e.g. a constructor that runs at load time)"),
    (r"\b_?Thread_local\b|\bthread_local\b|\b__thread\b", "declares thread-local state"),
    (r"\b__seg_[fg]s\b", "reads memory through a segment register"),
    (r"\b(__half2?|__nv_bfloat162?|nv_bfloat162?|__nv_fp8\w*|_Float16|__fp16|__bf16|__float2half\w*|__half2float|"
     r"__float2bfloat16\w*|__bfloat162float)\b|\bhalf2?\b\s*[*&]*\s*[A-Za-z_]",
     "uses half precision (a silent dtype downgrade: the task is float32)"),
    (_STREAMS, "uses a stream, an event or a graph (work left on a side stream would escape the timing): launch "
               "on the default stream"),
    (_MEMORY, "allocates memory (a buffer kept between calls is a cache; the output is already allocated)"),
    (r"\b(pthread\w*|fork|vfork|clone|system|popen|exec\w*|dlopen|dlsym|syscall|mmap|mprotect|signal|setjmp|"
     r"longjmp|clock\w*|gettimeofday|time|nanosleep|__nanosleep|usleep|sleep|fopen|fwrite|fread|open|creat|write|read|"
     r"printf|fprintf|puts|getenv|exit|abort|__trap|__brkpt)\s*\(",
     "calls a function that reaches the OS, the console or a clock"),
]


def extract_code(text: str) -> str | None:
    """The last ```cuda (or ```cu, ```cpp, ```c++) fenced block of a reply, or None."""
    blocks = _CODE.findall(text or "")
    return blocks[-1] if blocks else None


# --- static checks: before anything is compiled, no GPU needed -------------------------------------------
def static_problems(source: str, signature: str) -> list[str]:
    """What is wrong with a CUDA candidate before compiling it; empty when nothing is."""
    code = re.sub(r"//[^\n]*|/\*.*?\*/", " ", source, flags=re.S)  # comments may say anything
    problems = checks.lexical_problems(source, None, checks.cuda_pragma_ok, checks.CUDA_PRAGMAS)
    problems += _host_function_problems(code, signature)
    if not re.search(r"\b__global__\b", code):
        problems.append("defines no __global__ kernel: the host function must launch the work on the GPU")
    for header in (h.strip() for h in re.findall(r"#\s*include\s*<([^>]+)>", code)):
        if header in ALLOWED_HEADERS:
            continue
        if header in _HALF_HEADERS:
            problems.append(f"includes <{header}>: half precision (a silent dtype downgrade: the task is float32)")
        elif _LIBRARIES.match(header):
            problems.append(f"includes <{header}>: calls the reference library (torch, cuBLAS, cuDNN, thrust, "
                            "cub, ...) instead of writing the kernel")
        else:
            problems.append(f"includes <{header}>; allowed: {', '.join(ALLOWED_HEADERS)}")
    if re.search(r"#\s*include\s*[^<\s]", code):
        problems.append("includes a local header or a macro; only the allowed <headers>")
    problems += [why for pattern, why in _FORBIDDEN if re.search(pattern, code)]
    for name in sorted(set(re.findall(r"\b__builtin_(\w+)", code)) - _ALLOWED_BUILTINS):
        problems.append(f"calls __builtin_{name}, which a kernel may not use (it reaches the clock or the stack)")
    for name in sorted(set(re.findall(r"\b(cuda[A-Z]\w*)\s*\(", code))):
        if name not in ALLOWED_CUDA_CALLS and not re.fullmatch(f"{_STREAMS}|{_MEMORY}", name):
            problems.append(f"calls {name}; besides launching kernels a host function may call only "
                            f"{', '.join(ALLOWED_CUDA_CALLS)}")
    for config in re.findall(r"<<<(.*?)>>>", code, flags=re.S):
        arguments = _top_level_split(config)
        if len(arguments) > 3 and arguments[3].strip() not in ("0", "nullptr", "NULL"):
            problems.append("launches a kernel on a stream of its own (work left on a side stream would escape "
                            "the timing): use <<<grid, block>>> or <<<grid, block, shared_bytes>>>")
    problems += _state_problems(code)
    for match in re.finditer(r"\bextern\b", code):
        if not re.match(r'\s*("C"\s*(\{|void\s+kernel\s*\()|__shared__)', code[match.end():]):
            problems.append('declares an extern symbol (allowed: extern "C" on the host function, '
                            'extern __shared__)')
            break
    return list(dict.fromkeys(problems))


def _host_function_problems(code: str, signature: str) -> list[str]:
    """The host function is defined once, as a plain host function, with the task's parameter types."""
    definitions = []
    for match in re.finditer(rf"\bvoid\s+{HOST_FUNCTION}\s*\(", code):
        close = _closing_paren(code, match.end() - 1)
        if close is not None and code[close + 1:].lstrip().startswith("{"):  # a definition, not a prototype
            specifiers = re.sub(r"^\s*#.*$", "", re.split(r"[;{}]", code[:match.start()])[-1], flags=re.M)
            definitions.append((specifiers, code[match.end():close]))
    if not definitions:
        return [f"must define the host function `{signature}` (it launches your __global__ kernels)"]
    if len(definitions) > 1:
        return [f"defines `{HOST_FUNCTION}` {len(definitions)} times; define the host function once (and name "
                "your __global__ kernels otherwise)"]
    specifiers, parameters = definitions[0]
    problems = []
    if re.search(r"\b__global__\b", specifiers) or ("__device__" in specifiers and "__host__" not in specifiers):
        problems.append(f"`{HOST_FUNCTION}` must be a host function, not a __global__ or __device__ one: it "
                        "launches your kernels")
    wanted = _parameter_types(signature[signature.index("(") + 1:signature.rindex(")")])
    got = _parameter_types(parameters)
    if got != wanted:
        problems.append(f"defines {HOST_FUNCTION}({', '.join(got)}); the task's signature is {signature}")
    return problems


_TYPE_WORDS = {"*", "const", "int", "float", "double", "long", "short", "char", "unsigned", "signed", "bool"}


def _parameter_types(parameters: str) -> list[str]:
    """The types of a parameter list, canonical: names, __restrict__ and top-level const dropped,
    `float const*` read as `const float*`."""
    types = []
    for parameter in parameters.split(","):
        tokens = re.findall(r"[A-Za-z_]\w*|\*", re.sub(r"\b(__restrict__|__restrict|restrict)\b", " ", parameter))
        if len(tokens) > 1 and tokens[-1] not in _TYPE_WORDS:
            tokens = tokens[:-1]  # the parameter's name
        stars = tokens.count("*")
        base = tokens[:tokens.index("*")] if stars else tokens
        const = "const " if stars and "const" in base else ""
        types.append(const + " ".join(t for t in base if t != "const") + "*" * stars)
    return [t for t in types if t]


def _state_problems(code: str) -> list[str]:
    """Variables that outlive a call: static (except constants and functions) and device-side globals."""
    problems = []
    for match in re.finditer(r"\bstatic\b(.{0,160})", code, flags=re.S):
        qualifiers = re.match(r"\s*((__global__|__device__|__host__|__forceinline__|__noinline__|inline|constexpr|"
                              r"const)\s+)*", match.group(1))
        rest = match.group(1)[qualifiers.end():]
        initialised = re.match(r"[A-Za-z_][\w:]*\s+[A-Za-z_]\w*\s*(\[[^\]]*\]\s*)*=", rest)  # no pointer
        constant = "constexpr" in qualifiers.group(0) or ("const" in qualifiers.group(0) and initialised)
        if not (_is_function(rest) or constant):  # `static const float* last;` is a pointer cache
            problems.append("declares a static variable (state kept between calls)")
            break
    for match in re.finditer(r"\b(__device__|__constant__|__managed__)\b", code):
        if match.group(1) != "__device__" or not _is_function(code[match.end():]):
            problems.append("declares a __device__, __constant__ or __managed__ variable (state kept on the GPU "
                            "between calls)")
            break
    return problems


def _is_function(declaration: str) -> bool:
    """Whether a declaration (from its type on) declares a function: `(` comes before `[`, `=`, `;` or `{`."""
    first = re.search(r"[(\[=;{]", declaration)
    return first is not None and first.group() == "("


def _closing_paren(code: str, open_index: int) -> int | None:
    depth = 0
    for i in range(open_index, len(code)):
        depth += {"(": 1, ")": -1}.get(code[i], 0)
        if depth == 0:
            return i
    return None


def _top_level_split(text: str) -> list[str]:
    """Split on the commas outside brackets: the arguments of a launch configuration."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"(": 1, "[": 1, "{": 1, ")": -1, "]": -1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    return parts + [text[start:]]


# --- nvcc and the link check -------------------------------------------------------------------------------
@lru_cache(maxsize=4)
def _nvcc_version(nvcc: str) -> str:
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()


def compile_cuda(source: str, signature: str, arch: str | None = None,
                 timeout_s: float = COMPILE_TIMEOUT_S) -> cpu_c.CompileResult:
    """nvcc the candidate into an object file and a shared library beside it (`<key>.o`, `<key>.so`), in
    subprocesses with a timeout; cached by a hash of the wrapped source, flags, architecture and nvcc version.

    arch: nvcc's -arch, e.g. "sm_90"; None = this machine's GPU (raises RuntimeError where there is none).
    """
    arch = arch or gpu_arch()
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise RuntimeError("the cuda kernel backend needs nvcc: install the CUDA toolkit and put nvcc on PATH")
    wrapped = _PRELUDE.format(signature=signature) + source + _EPILOGUE
    key = hashlib.sha256("\0".join([wrapped, *NVCC_FLAGS, arch, _nvcc_version(nvcc)]).encode()).hexdigest()[:24]
    folder = cpu_c._cache_dir() / "cuda"
    folder.mkdir(exist_ok=True)
    library, obj = folder / f"{key}.so", folder / f"{key}.o"
    if library.exists():  # written last, so its object file is there too
        return cpu_c.CompileResult(True, str(library), "", 0.0, cached=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        (folder / "kernel.cu").write_text(wrapped)
        log = []
        for command in ([nvcc, *NVCC_FLAGS, f"-arch={arch}", "-c", "kernel.cu", "-o", "kernel.o"],
                        [nvcc, "-shared", f"-arch={arch}", "kernel.o", "-o", "kernel.so"]):
            left = max(1.0, timeout_s - (time.perf_counter() - start))
            run = compiler.run_boxed(command, folder, left, source_name="kernel.cu", memory_bytes=NVCC_MEMORY_BYTES,
                                     keep_env=_NVCC_ENV)
            log.append(run.log)
            if run.returncode is None:
                return cpu_c.CompileResult(False, None, f"nvcc did not finish within {timeout_s:.0f} s", timeout_s)
            if run.returncode != 0:
                return cpu_c.CompileResult(False, None, "\n".join(filter(None, log)) or
                                           f"nvcc failed (exit code {run.returncode})", time.perf_counter() - start)
        for built, target in ((folder / "kernel.o", obj), (folder / "kernel.so", library)):
            partial = target.with_name(target.name + f".{os.getpid()}.tmp")
            shutil.copyfile(built, partial)
            partial.rename(target)  # atomic: another process never loads a half-written library
    return cpu_c.CompileResult(True, str(library), "\n".join(filter(None, log)), time.perf_counter() - start)


def link_problems(library: str, function: str = HOST_FUNCTION) -> list[str]:
    """What the candidate's object file (beside `library`) imports, defines or contains that a kernel must not,
    judged against the object file of a known-good kernel (`_baseline_object`)."""
    obj = str(Path(library).with_suffix(".o"))
    baseline = _baseline_object()
    table = subprocess.run([checks._binutil("nm"), obj], capture_output=True, text=True).stdout
    rows = (line.split() for line in table.splitlines())
    symbols = [(parts[-2], parts[-1]) for parts in rows if len(parts) >= 2]  # (kind, name)
    nvcc_own = set(checks.undefined_symbols(baseline, dynamic=False))
    problems = []
    for kind, name in checks.undefined_symbols(obj, dynamic=False):  # U strong, w and v weak
        if name in ALLOWED_IMPORTS or (kind, name) in nvcc_own:
            continue
        if name.startswith("__cudaRegister") and "Var" in name:
            problems.append("defines a __device__, __constant__ or __managed__ variable (state kept on the GPU "
                            "between calls)")
        else:
            problems.append(f"calls {name}{' (imported weakly)' if kind in 'wv' else ''}, which a kernel may not use")
    kinds = {name: kind for kind, name in symbols}
    if kinds.get(function) != "T":
        problems.append(f"does not define `{function}` with the task's signature (parameter types must match "
                        "exactly; a different one is another C++ function)")
    own = ("__cuda", "__fatDeviceText", "__device_stub__")  # nvcc's registration handles and launch-stub statics
    data = sorted(name for kind, name in symbols if kind in "BDCGSbd" and not any(o in name for o in own))
    if data:
        problems.append(f"defines writable data ({', '.join(data[:3])}): state kept between calls")
    if _loader_bytes(obj) > _loader_bytes(baseline):
        problems.append("runs code when loaded or unloaded (a constructor or destructor besides nvcc's own)")
    extra = sorted((checks.instruction_counts(obj) - checks.instruction_counts(baseline)).keys())
    if extra:
        problems.append(f"contains the instruction {', '.join(extra)}, which no kernel needs (a system call, a "
                        "clock or the CPU's identity)")
    return list(dict.fromkeys(problems))


def _loader_bytes(obj: str) -> int:
    """Bytes of the constructor and destructor tables of an object file (`.init_array.101` counts too)."""
    return sum(size for name, (size, _) in checks.elf_sections(obj).items()
               if any(name == s or name.startswith(s + ".") for s in _LOADER_SECTIONS))


BASELINE_ARCH = "sm_80"
"""the architecture of the known-good kernel's object file (its host code is the same for every one)"""


@lru_cache(maxsize=1)
def _baseline_object() -> str:
    """The object file of a known-good kernel (`_SELF_TEST`): nvcc's own imports, constructors and code."""
    built = compile_cuda(_SELF_TEST, _SELF_TEST_SIGNATURE, BASELINE_ARCH)
    if not built.ok:
        raise RuntimeError(f"nvcc cannot compile a known-good kernel: {built.log}")
    return str(Path(built.library).with_suffix(".o"))


# --- is there a GPU? asked in a child, once ---------------------------------------------------------------
_SELF_TEST = ("__global__ void relu_kernel(const float* x, float* out, int n) {\n"
              "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
              "    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;\n}\n\n"
              "void kernel(const float* x, float* out, int n) {\n"
              "    relu_kernel<<<(n + 255) / 256, 256>>>(x, out, n);\n}\n")
_SELF_TEST_SIGNATURE = "void kernel(const float* x, float* out, int n)"


def _probe_child(conn) -> None:
    """Which GPU PyTorch sees, in a process of its own (the caller never initialises CUDA)."""
    try:
        import torch

        if not torch.cuda.is_available():
            conn.send(("error", f"PyTorch {torch.__version__} sees no CUDA GPU"))
            return
        major, minor = torch.cuda.get_device_capability(0)
        conn.send(("ok", (torch.cuda.get_device_name(0), major, minor)))
    except BaseException as e:  # noqa: BLE001 - everything goes back to the parent
        conn.send(("error", f"{type(e).__name__}: {e}"))


@lru_cache(maxsize=1)
def _backend() -> tuple[str | None, str]:
    """(why the cuda backend cannot run here, or None; the GPU's nvcc -arch). A machine that cannot build and
    run a known-good kernel fails here, so that no candidate is ever blamed for the machine."""
    use_cpu = "; on this machine use backend='cpu_c'"
    if shutil.which("nvcc") is None:
        return "the cuda kernel backend needs nvcc (the CUDA toolkit) on PATH" + use_cpu, ""
    status, value = children.run_in_child(_probe_child, (), timeout_s=120)
    if status != "ok":
        return f"the cuda kernel backend needs an NVIDIA GPU that PyTorch can use ({value})" + use_cpu, ""
    name, major, minor = value
    arch = f"sm_{major}{minor}"
    built = compile_cuda(_SELF_TEST, _SELF_TEST_SIGNATURE, arch)
    problems = link_problems(built.library) if built.ok else [built.log]
    x = np.linspace(-2.0, 2.0, 1000, dtype=np.float32)
    if not problems:
        status, value = children.run_in_child(_candidate_child, (built.library, [[x]], x.shape, [x.size]),
                                           timeout_s=120)
        if status != "ok" or not np.array_equal(value[0], np.maximum(x, 0)):
            problems = [f"{status}: {value}" if status != "ok" else "wrong output"]
    if problems:
        return (f"the cuda kernel backend cannot build and run a known-good kernel on this {name} ({arch}) with "
                f"{shutil.which('nvcc')}: {'; '.join(problems)}"), arch
    return None, arch


def backend_problem() -> str | None:
    """Why `verify(..., backend="cuda")` cannot compile and run candidates on this machine; None when it can."""
    return _backend()[0]


def gpu_arch() -> str:
    """nvcc's -arch for this machine's GPU (e.g. "sm_90"); raises RuntimeError saying what to do without one."""
    problem, arch = _backend()
    if problem is not None:
        raise RuntimeError(problem)
    return arch


# --- children: the candidate runs on the GPU in a process of its own ---------------------------------------
def _limit_child() -> None:
    """A CPU-time limit only: CUDA reserves a huge virtual address space, so an RLIMIT_AS (as in cpu_c) would
    stop it from starting; a candidate cannot allocate (static checks), and the wall clock is the parent's."""
    seconds = int(3 * RUN_TIMEOUT_S) + 1
    resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))


def _load(library: str, n_inputs: int, n_sizes: int):
    """(the host function, the harness's launch-error reader) from the candidate's library."""
    loaded = ctypes.CDLL(library)
    function = loaded.kernel
    function.argtypes = [ctypes.c_void_p] * (n_inputs + 1) + [ctypes.c_int] * n_sizes
    function.restype = None
    launch_error = getattr(loaded, _LAUNCH_ERROR)
    launch_error.argtypes, launch_error.restype = [], ctypes.c_char_p
    return function, launch_error


def _call(function, inputs: list, out, sizes: list[int]) -> None:
    function(*[t.data_ptr() for t in inputs], out.data_ptr(), *sizes)


def _failure(error: BaseException) -> str:
    """The first line of an error: PyTorch's CUDA errors go on with advice about CUDA_LAUNCH_BLOCKING."""
    return f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"


def _candidate_child(library: str, input_sets: list[list[np.ndarray]], out_shape: tuple[int, ...],
                     sizes: list[int], conn) -> None:
    """Run the candidate on every input set on the GPU; send back the outputs (on the host), or what went wrong."""
    try:
        import torch

        _limit_child()
        function, launch_error = _load(library, len(input_sets[0]), len(sizes))
        outputs = []
        for arrays in input_sets:
            inputs = [torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).cuda() for a in arrays]  # fresh
            out = torch.full(out_shape, float("nan"), device="cuda")  # a kernel that writes nothing is wrong
            torch.cuda.synchronize()
            _call(function, inputs, out, sizes)
            torch.cuda.synchronize()  # device-wide: waits for work on every stream, raises the kernel's fault
            error = launch_error()
            if error:
                conn.send(("error", f"the kernel launch failed: {error.decode()}"))
                return
            # compared with the host originals, which no kernel can reach
            if not all(np.array_equal(t.cpu().numpy(), a) for t, a in zip(inputs, arrays, strict=True)):
                conn.send(("mutated", "the kernel changed its inputs"))
                return
            outputs.append(out.cpu().numpy())
        conn.send(("ok", outputs))
    except BaseException as e:  # noqa: BLE001 - an illegal address, a bad library: a verdict, not a crash
        conn.send(("error", _failure(e)))


def _reference_model(reference_source: str):
    import torch

    namespace: dict = {}
    exec(compile(reference_source, "<reference>", "exec"), namespace)
    torch.backends.cuda.matmul.allow_tf32 = False  # the reference computes in float32, as the candidate must
    torch.backends.cudnn.allow_tf32 = False
    return namespace["Model"](*namespace["get_init_inputs"]()).cuda().eval()


def _event_seconds(call, flush) -> float:
    """GPU seconds of one call after an L2 flush, by CUDA events around it."""
    import torch

    flush.zero_()  # a cold cache for every call (KernelBench): neither side reads the other's data from L2
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    call()
    # device-wide before the end event: work the call left on another stream is inside the timing. It adds the
    # same few microseconds of host round trip to both sides, which can only shrink a speedup, never inflate it.
    torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def _timing_child(library: str, reference_source: str, inputs: list[np.ndarray], out_shape: tuple[int, ...],
                  sizes: list[int], warmup: int, repeats: int, conn) -> None:
    """Median seconds of candidate and reference (the task's Model on CUDA tensors), one of each per round."""
    try:
        import torch

        _limit_child()
        model = _reference_model(reference_source)
        function, launch_error = _load(library, len(inputs), len(sizes))
        tensors = [torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32)).cuda() for a in inputs]
        out = torch.empty(out_shape, device="cuda")
        flush = torch.empty(L2_FLUSH_BYTES // 4, device="cuda")
        candidate, reference = [], []
        with torch.no_grad():
            for i in range(warmup + repeats):
                out.fill_(float("nan"))  # the last call's output is gone: no kernel skips work it did before
                seconds = _event_seconds(lambda: _call(function, tensors, out, sizes), flush)
                reference_seconds = _event_seconds(lambda: model(*tensors), flush)
                if i >= warmup:
                    candidate.append(seconds)
                    reference.append(reference_seconds)
        error = launch_error()
        if error:
            conn.send(("error", f"the kernel launch failed: {error.decode()}"))
            return
        conn.send(("ok", (float(np.median(candidate)), float(np.median(reference)))))
    except BaseException as e:  # noqa: BLE001
        conn.send(("error", _failure(e)))


# --- the naive CUDA candidate of every task ----------------------------------------------------------------
_LOOP = re.compile(r"[ \t]*for \(int (\w+) = 0; \1 < (\w+); \1\+\+\) \{\n")


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def naive_cuda_source(task: KernelTask) -> str:
    """A correct CUDA candidate made from the task's naive C body: the cold-start demonstrations of the cuda
    backend and the "correct" candidate of the GPU tests.

    The body's outer loops, when perfectly nested (up to two: over i; over rows and columns; over the output's
    rows and columns in matmul), become one thread per iteration with a bounds check; what is inside them runs
    as written, so a row-wise operator (softmax, a row reduction) is one thread per row. A body that opens with
    anything else runs whole on one thread (<<<1, 1>>>): correct, and as slow as one GPU thread.
    """
    body, loops = task.naive_c, []
    while len(loops) < 2 and (match := _LOOP.match(body)):
        inside = body[match.end():].rstrip()
        if not (inside.endswith("}") and _balanced(inside[:-1])):  # the loop is not the whole rest of the body
            break
        loops.append(match.groups())
        body = inside[:-1]
    parameters = task.signature[task.signature.index("(") + 1:-1]
    arguments = ", ".join([name for name, _ in task.inputs] + ["out", *task.sizes])
    if not loops:
        return (f"#include <math.h>\n\n// one thread runs the whole naive C body: correct, and as slow as one "
                f"GPU thread\n__global__ void naive_kernel({parameters}) {{\n{task.naive_c}\n}}\n\n"
                f"void kernel({parameters}) {{\n    naive_kernel<<<1, 1>>>({arguments});\n}}\n")
    threads = "(long long)" + " * ".join(bound for _, bound in loops)
    if len(loops) == 1:
        indices = f"    int {loops[0][0]} = (int)index;\n"
        what = f"one thread per {loops[0][0]}"
    else:
        (outer, _), (inner, inner_bound) = loops
        indices = (f"    int {outer} = (int)(index / {inner_bound});\n"
                   f"    int {inner} = (int)(index % {inner_bound});\n")
        what = f"one thread per ({outer}, {inner})"
    return (f"#include <math.h>\n\n// {what}: the naive C body's outer loop{'s' if len(loops) > 1 else ''} "
            f"spread over the grid\n__global__ void naive_kernel({parameters}) {{\n"
            f"    long long index = (long long)blockIdx.x * blockDim.x + threadIdx.x;\n"
            f"    if (index >= {threads}) return;\n{indices}"
            f"{textwrap.indent(textwrap.dedent(body).strip(), '    ')}\n}}\n\n"
            f"void kernel({parameters}) {{\n    long long threads = {threads};\n"
            f"    naive_kernel<<<(unsigned int)((threads + 255) / 256), 256>>>({arguments});\n}}\n")
