"""Kernel verifier, compile side, as a security boundary: hostile candidates of three classes, each refused by
the layer that should refuse it, and each layer tested alone (a candidate compiled past the static checks is
still refused by the link check and the disassembly; gcc's box holds without the static include refusal).

1. static-check bypasses: the preprocessor assembles what a check on the text forbids (token pasting, a
   backslash-newline splice, digraphs, trigraphs, `_Pragma`), attributes in another spelling, weak imports;
3. writable state the link check misses: a local static named like one of the toolchain's own;
6. the compiler as an attack surface: includes that echo a file or never end, a huge unroll factor, a
   compiler that outlives its timeout;
and the cuda backend's equivalents up to the link check (static checks on CUDA sources; the link check on
objects gcc builds in place of nvcc's)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest

from agentrl_lite.tasks.kernels import cpu_c, task_by_name, verify

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the cpu_c backend needs gcc")
RELU = task_by_name("relu")
SIG = RELU.signature
GOOD = "    for (int i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;\n"
RDTSC = ' volatile("rdtsc" ::: "eax", "edx");\n'
"""the body of an inline-assembly statement (a harmless time read), after a spelling of `__asm__`"""


def kernel(body: str = GOOD, head: str = "#include <math.h>\n") -> str:
    return f"{head}\n{SIG} {{\n{body}}}\n"


def reply(source: str) -> str:
    return f"```c\n{source}```"


# --- class 1: what the preprocessor assembles, weak imports, constructors ---------------------------------
BYPASSES = {
    # name: (a correct relu kernel with a hidden extra, a substring of the static stage's message)
    "inline assembly by token pasting": (kernel("    CAT(__as, m__)" + RDTSC + GOOD, head="#define CAT(a, b) a##b\n"),
                                         "##"),
    "inline assembly by a backslash-newline splice": (kernel("    __as\\\nm__" + RDTSC + GOOD), "splices"),
    "inline assembly by digraph pasting": (kernel("    CAT(__as, m__)" + RDTSC + GOOD,
                                                  head="%:define CAT(a, b) a %:%: b\n"), "digraph"),
    "inline assembly by trigraph pasting": (kernel("    CAT(__as, m__)" + RDTSC + GOOD,
                                                   head="??=define CAT(a, b) a ??=??= b\n"), "trigraph"),
    "a weak import of creat by _Pragma": (kernel("    if (n < 0) creat(\"/tmp/x\", 0600);\n" + GOOD,
                                                 head='_Pragma("weak creat") int creat(const char*, int);\n'),
                                          "_Pragma"),
    "a constructor by __attribute with one parenthesis pair": (
        kernel(GOOD, head="__attribute((constructor)) void boot(void) {}\n"), "__attribute__"),
    "a weak import of the Python C API": (
        kernel("    if (n < 0) PyRun_SimpleString(\"import os\");\n" + GOOD,
               head="__attribute((weak)) int PyRun_SimpleString(const char*);\n"), "__attribute__"),
    "a constructor by a [[gnu::constructor]] attribute": (kernel(GOOD, head="[[gnu::constructor]] void boot(void) {}\n"),
                                                          "attribute"),
    "the time-stamp counter by a builtin": (kernel("    out[0] = (float)__builtin_ia32_rdtsc();\n" + GOOD),
                                            "__builtin_ia32_rdtsc"),
}


@pytest.mark.parametrize("name", list(BYPASSES))
def test_the_static_check_reads_what_the_preprocessor_makes(name):
    source, message = BYPASSES[name]
    verdict = verify(RELU, reply(source), shape="smoke", timing=False)
    assert verdict.stage == "static", (verdict.stage, verdict.message)
    assert message in verdict.message, verdict.message


def test_the_static_check_allows_macros_headers_and_loop_hints():
    source = kernel("    #pragma GCC unroll 8\n    for (int i = 0; i < n; i++) out[i] = RELU1(x[i]);\n",
                    head="#include <math.h>\n#include <stdint.h>\n#include <float.h>\n#include <string.h>\n"
                         "#define RELU1(v) ((v) > 0.0f ? (v) : 0.0f) /* a # in a comment */\n")
    assert cpu_c.static_problems(source, SIG) == []


LINK_ALONE = {
    # compiled directly, past the static checks: name -> (source, a substring of a link problem)
    "a weak import of creat": (kernel("    if (n < 0) creat(\"/tmp/x\", 0600);\n" + GOOD,
                                      head="#pragma weak creat\nint creat(const char*, int);\n"), "calls creat"),
    "a weak import of the Python C API": (
        kernel("    if (n < 0) PyRun_SimpleString(\"import os\");\n" + GOOD,
               head="__attribute__((weak)) int PyRun_SimpleString(const char*);\n"), "calls PyRun_SimpleString"),
    "a constructor": (kernel(GOOD, head="__attribute__((constructor)) void boot(void) {}\n"), "when loaded"),
    "a destructor": (kernel(GOOD, head="__attribute__((destructor)) void bye(void) {}\n"), "when loaded"),
    "a system call in inline assembly": (
        kernel('    long r; __asm__ volatile("syscall" : "=a"(r) : "a"(39L) : "rcx", "r11", "memory");\n' + GOOD),
        "syscall"),
    "the time-stamp counter by a builtin": (kernel("    out[0] = (float)__builtin_ia32_rdtsc();\n" + GOOD), "rdtsc"),
    "the CPU's identity": (kernel('    unsigned a = 0, b, c = 0, d; __asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), '
                                  '"=d"(d));\n' + GOOD), "cpuid"),
    "an int 0x80 system call": (kernel('    long r; __asm__ volatile("int $0x80" : "=a"(r) : "a"(20L));\n' + GOOD),
                                "int"),
}


@pytest.mark.parametrize("name", list(LINK_ALONE))
def test_the_link_check_alone_refuses_weak_imports_constructors_and_instructions(name):
    source, message = LINK_ALONE[name]
    assert cpu_c.static_problems(source, SIG), "the static check refuses it too"
    compiled = cpu_c.compile_c(source)
    assert compiled.ok, compiled.log
    problems = cpu_c.link_problems(compiled.library)
    assert any(message in p for p in problems), problems


def test_the_link_check_passes_a_kernel_that_imports_math():
    source = kernel("    for (int i = 0; i < n; i++) out[i] = fmaxf(tanhf(x[i]), 0.0f) + 0.0f * expf(x[i]);\n")
    compiled = cpu_c.compile_c(source)
    assert compiled.ok and cpu_c.link_problems(compiled.library) == [], compiled.log


# --- class 3: writable state whatever its name ------------------------------------------------------------
def test_a_local_static_named_like_a_toolchain_symbol_is_writable_data():
    """`static int completed` is `completed.0` in the symbol table, the name of a flag in gcc's start-up code:
    a filter by name lets it through, a comparison of section sizes does not."""
    source = kernel("    static int completed;\n    if (completed == n) return;\n    completed = n;\n" + GOOD)
    compiled = cpu_c.compile_c(source)
    assert compiled.ok, compiled.log
    assert any("writable" in p for p in cpu_c.link_problems(compiled.library))


def test_a_pasted_static_cache_is_refused_before_it_runs():
    source = kernel("    CAT(sta, tic) int completed;\n    if (completed == n) return;\n    completed = n;\n" + GOOD,
                    head="#define CAT(a, b) a##b\n")
    verdict = verify(RELU, reply(source), shape="smoke", timing=False)
    assert verdict.stage in ("static", "link"), (verdict.stage, verdict.message)


# --- class 6: the compiler -----------------------------------------------------------------------------------
SECRET = "TOKEN_63_DO_NOT_ECHO"


def test_an_include_never_echoes_another_files_content(tmp_path):
    token = tmp_path / "token.txt"
    token.write_text(f"{SECRET}\n")
    by_macro = kernel(GOOD, head=f'#define FILE "{token}"\n#include FILE\n')
    verdict = verify(RELU, reply(by_macro), shape="smoke", timing=False)
    assert SECRET not in verdict.message and verdict.reward < 0, verdict.message
    compiled = cpu_c.compile_c(kernel(GOOD, head=f'#include "{token}"\n'))  # past the static check
    assert not compiled.ok and SECRET not in compiled.log, compiled.log


def test_an_include_of_dev_zero_stays_under_the_compilers_memory_limit():
    """Compiled directly (the static check refuses the include): the box's memory limit holds alone. In a
    process of its own, whose children's peak memory is read afterwards."""
    probe = ("import resource, time\nfrom agentrl_lite.tasks.kernels import cpu_c\ncpu_c._cache_dir()\n"
             "start = time.perf_counter()\n"
             "r = cpu_c.compile_c('#include \"/dev/zero\"\\nvoid kernel(float* out) {}\\n', timeout_s=20)\n"
             "print(r.ok, time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    ok, seconds, peak_kb = done.stdout.split()
    assert ok == "False" and float(seconds) < 25
    assert int(peak_kb) < 1.1 * (1 << 20), f"gcc reached {int(peak_kb) >> 10} MB"


HUGE_UNROLL = kernel("    #pragma GCC unroll 65534\n    for (int i = 0; i < 65534; i++) out[i] = x[i] * x[i] + 1.0f;\n")
"""a loop gcc takes minutes to unroll completely"""


def test_a_huge_unroll_factor_is_refused_before_compiling():
    start = time.perf_counter()
    verdict = verify(RELU, reply(HUGE_UNROLL), shape="smoke", timing=False)
    assert verdict.stage == "static" and "unroll" in verdict.message, (verdict.stage, verdict.message)
    assert time.perf_counter() - start < 10


def _compilers() -> set[int]:
    """Process ids of the running compiler proper (cc1) processes (a killed one waiting to be reaped, a zombie,
    does not run)."""
    found = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/stat") as f:
                head, tail = f.read().rsplit(")", 1)  # "pid (name) state ..."
        except (OSError, ValueError):
            continue
        if head.split("(", 1)[1] == "cc1" and tail.split()[0] != "Z":
            found.add(int(pid))
    return found


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_compile_past_its_timeout_leaves_no_compiler_running():
    cpu_c.compile_c(kernel())  # the cache folder's first use imports torch: not part of the compile's time
    before = _compilers()
    start = time.perf_counter()
    compiled = cpu_c.compile_c(HUGE_UNROLL + "/* timeout test */\n", timeout_s=1.5)
    assert not compiled.ok and time.perf_counter() - start < 8
    time.sleep(1.5)  # a kernel's own cc1 run by another test lasts under a second
    assert not (_compilers() - before), "cc1 kept running after the compile's timeout"


def test_the_log_keeps_only_diagnostics_located_in_the_candidates_file():
    from agentrl_lite.tasks.kernels import compiler

    log = (f"In file included from kernel.c:2:\n/home/u/token.txt:1:1: error: unknown type name '{SECRET}'\n"
           f"    1 | {SECRET}\n      | ^~~~\nkernel.c:5:3: error: expected ';' before 'out'\ncollect2: error\n")
    assert compiler.own_diagnostics(log) == "kernel.c:5:3: error: expected ';' before 'out'"
    assert compiler.own_diagnostics("kernel.cu(3): error: x\nharness.cu(1): error: y", "kernel.cu") == \
        "kernel.cu(3): error: x"


def test_the_box_alone_bounds_memory_and_time_and_leaves_no_compiler(tmp_path):
    """`run_boxed` (nvcc's box, tried with gcc): without the sandbox, the limits and the process group hold."""
    from agentrl_lite.tasks.kernels import compiler

    (tmp_path / "kernel.c").write_text('#include "/dev/zero"\n')
    start = time.perf_counter()
    run = compiler.run_boxed(["gcc", "-E", "kernel.c", "-o", "kernel.i"], tmp_path, timeout_s=20)
    assert run.returncode not in (0, None) and time.perf_counter() - start < 20, run
    (tmp_path / "kernel.c").write_text(HUGE_UNROLL)
    before = _compilers()
    run = compiler.run_boxed(["gcc", "-O3", "-c", "kernel.c", "-o", "kernel.o"], tmp_path, timeout_s=2)
    assert run.returncode is None
    time.sleep(1)
    assert not (_compilers() - before), "cc1 kept running after the box's timeout"


# --- the cuda backend: the same classes, up to the link check (no GPU, no nvcc needed) -------------------
CUDA_KERNEL = ("__global__ void relu_kernel(const float* x, float* out, int n) {\n"
               "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
               "    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;\n}\n")
CUDA_LAUNCH = "    relu_kernel<<<(n + 255) / 256, 256>>>(x, out, n);\n"


def cuda_source(body: str = CUDA_LAUNCH, head: str = "") -> str:
    return f"#include <cuda_runtime.h>\n{head}\n{CUDA_KERNEL}\n{SIG} {{\n{body}}}\n"


PTX = ' volatile("membar.gl;");\n'
CUDA_BYPASSES = {
    # name: (source, a substring of a static problem)
    "inline PTX by a backslash-newline splice": (cuda_source("    as\\\nm" + PTX + CUDA_LAUNCH), "splices"),
    "inline PTX by digraph pasting": (cuda_source("    CAT(as, m)" + PTX + CUDA_LAUNCH,
                                                  head="%:define CAT(a, b) a %:%: b"), "digraph"),
    "inline PTX by trigraph pasting": (cuda_source("    CAT(as, m)" + PTX + CUDA_LAUNCH,
                                                   head="??=define CAT(a, b) a ??=??= b"), "trigraph"),
    "a constructor by __attribute with one parenthesis pair": (
        cuda_source(head="__attribute((constructor)) void boot(void) {}"), "__attribute__"),
    "a constructor by a [[gnu::constructor]] attribute": (cuda_source(head="[[gnu::constructor]] void boot() {}"),
                                                          "attribute"),
    "a weak import of the Python C API": (
        cuda_source('    if (n < 0) PyRun_SimpleString("import os");\n' + CUDA_LAUNCH,
                    head='__attribute((weak)) int PyRun_SimpleString(const char*);'), "__attribute__"),
    "the time-stamp counter by a builtin in the host function": (
        cuda_source("    if (__builtin_ia32_rdtsc() == 0) return;\n" + CUDA_LAUNCH), "__builtin_ia32_rdtsc"),
    "host thread-local state": (cuda_source(CUDA_LAUNCH, head="__thread int calls;"), "thread-local"),
    "a huge unroll factor": (cuda_source(head="__global__ void slow(float* o) {\n#pragma unroll 65534\n"
                                              "    for (int i = 0; i < 65534; i++) o[i] = 0.0f;\n}"), "unroll"),
    "a line marker claiming another file": (cuda_source(head='#line 1 "/etc/passwd"'), "#line"),
}


@pytest.mark.parametrize("name", list(CUDA_BYPASSES))
def test_the_cuda_static_check_refuses_what_the_preprocessor_would_assemble(name):
    from agentrl_lite.tasks.kernels import cuda

    source, message = CUDA_BYPASSES[name]
    problems = cuda.static_problems(source, SIG)
    assert any(message in p for p in problems), problems


CUDA_OBJECTS = {
    # host code as gcc builds it, standing in for nvcc's object file: name -> (C source, a link problem)
    "a weak import of the Python C API": (
        "__attribute__((weak)) int PyRun_SimpleString(const char*);\n"
        "void kernel(const float* x, float* out, int n) { if (n < 0 && PyRun_SimpleString) "
        "PyRun_SimpleString(\"1\"); out[0] = x[0]; }\n", "calls PyRun_SimpleString (imported weakly)"),
    "a constructor": ("__attribute__((constructor)) void boot(void) {}\n"
                      "void kernel(const float* x, float* out, int n) { out[0] = x[0]; }\n", "when loaded"),
    "a constructor of high priority": ("__attribute__((constructor(101))) void boot(void) {}\n"
                                       "void kernel(const float* x, float* out, int n) { out[0] = x[0]; }\n",
                                       "when loaded"),
    "the time-stamp counter in host code": (
        "void kernel(const float* x, float* out, int n) { unsigned lo, hi; "
        "__asm__ volatile(\"rdtsc\" : \"=a\"(lo), \"=d\"(hi)); out[0] = x[0] + (float)(lo & 0); }\n", "rdtsc"),
    "a system call in host code": (
        "void kernel(const float* x, float* out, int n) { long r; "
        "__asm__ volatile(\"syscall\" : \"=a\"(r) : \"a\"(39L) : \"rcx\", \"r11\"); out[0] = x[0]; }\n", "syscall"),
}
CUDA_CLEAN_OBJECT = "void kernel(const float* x, float* out, int n) { for (int i = 0; i < n; i++) out[i] = x[i]; }\n"


def _object(folder, name: str, source: str) -> str:
    """gcc -c the source into `<name>.o`; returns the path of the library beside it, as link_problems takes."""
    (folder / f"{name}.c").write_text(source)
    subprocess.run(["gcc", "-O2", "-fPIC", "-c", f"{name}.c", "-o", f"{name}.o"], cwd=folder, check=True)
    return str(folder / f"{name}.so")


@pytest.mark.parametrize("name", list(CUDA_OBJECTS))
def test_the_cuda_link_check_alone_refuses_weak_imports_constructors_and_instructions(name, tmp_path, monkeypatch):
    from agentrl_lite.tasks.kernels import cuda

    baseline = _object(tmp_path, "baseline", CUDA_CLEAN_OBJECT)
    monkeypatch.setattr(cuda, "_baseline_object", lambda: baseline[:-3] + ".o", raising=False)
    assert cuda.link_problems(_object(tmp_path, "clean", CUDA_CLEAN_OBJECT)) == []
    source, message = CUDA_OBJECTS[name]
    problems = cuda.link_problems(_object(tmp_path, "candidate", source))
    assert any(message in p for p in problems), problems
