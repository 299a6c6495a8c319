"""Kernel-generation RL, cuda backend, in three tiers:
- anywhere: fence parsing, the static checks on a suite of hostile CUDA candidates (one per known reward hack),
  idiomatic CUDA that must pass them, the naive CUDA source of every task, and the refusal to go further than the
  static stage without a GPU;
- with nvcc (no GPU needed): compiling, the cache, and the link check on what the static checks cannot see;
- with nvcc and a GPU: every naive kernel correct; wrong, faulting, hanging, side-stream and input-mutating
  kernels earn nothing and crash nothing; a correct kernel is timed and paid by tier.
"""

from __future__ import annotations

import dataclasses
import shutil
import time

import pytest

from agentrl_lite.tasks.kernels import TASKS, cuda, task_by_name, tiered_reward, verify
from agentrl_lite.tasks.kernels.stages import CORRECT_BUT_SLOWER, INCORRECT, INVALID, time_candidate

RELU = task_by_name("relu")
SIG = RELU.signature
ARCH = "sm_80"
"""the architecture of the compile-only tests (any nvcc from CUDA 11 to 13 targets it; no GPU needed)"""
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (the CUDA toolkit)")

RELU_KERNEL = ("__global__ void relu_kernel(const float* x, float* out, int n) {\n"
               "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
               "    if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;\n}\n")
LAUNCH = "    relu_kernel<<<(n + 255) / 256, 256>>>(x, out, n);"


def source(body: str = LAUNCH, head: str = "", kernels: str = RELU_KERNEL, signature: str = SIG) -> str:
    return f"#include <cuda_runtime.h>\n{head}\n{kernels}\n{signature} {{\n{body}\n}}\n"


def reply(text: str, fence: str = "cuda") -> str:
    return f"Here is the kernel.\n```{fence}\n{text}```"


@pytest.fixture(scope="module")
def gpu():
    """Skips a test unless this machine can build and run CUDA kernels (asked in a child: the test process
    never initialises CUDA)."""
    problem = cuda.backend_problem()
    if problem is not None:
        pytest.skip(problem)


# --- anywhere --------------------------------------------------------------------------------------------
def test_parse_takes_the_last_cuda_block_and_not_a_c_one():
    assert cuda.extract_code("```cuda\nint a;\n```\n```cpp\nint b;\n```") == "int b;\n"
    assert cuda.extract_code("```c++\nint c;\n```") == "int c;\n"
    assert cuda.extract_code("```c\nint a;\n```") is None  # a ```c block is for the cpu_c backend
    for text in ("I would launch one thread per element.", reply(source(), fence="python"), reply(source(), "c")):
        verdict = verify(RELU, text, shape="smoke", backend="cuda")
        assert verdict.stage == "parse" and verdict.reward == INVALID and "```cuda" in verdict.message


SIDE_STREAM = """    cudaStream_t side;
    cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking);
    relu_kernel<<<(n + 255) / 256, 256, 0, side>>>(x, out, n);"""

HOSTILE = {
    # name: (source, a substring of the static stage's message)
    "side stream": (source(SIDE_STREAM), "side stream"),
    "launch on a stream handle it was given": (source(LAUNCH.replace("256>>>", "256, 0, (CUstream_st*)2>>>")),
                                               "stream"),
    "per-thread default stream": (source(LAUNCH.replace("256>>>", "256, 0, cudaStreamPerThread>>>")), "stream"),
    "host callback": (source(LAUNCH + "\n    cudaLaunchHostFunc(0, 0, 0);"), "stream"),
    "events": (source("    cudaEvent_t e;\n    cudaEventCreate(&e);\n" + LAUNCH), "event"),
    "cudaMalloc cache keyed by size": (source("    static float* buffer = nullptr;\n    static int size = 0;\n"
                                              "    if (size != n) { cudaMalloc(&buffer, n * 4); size = n; }\n"
                                              + LAUNCH), "allocates memory"),
    "static cache keyed by pointer": (source("    static const float* last = nullptr;\n    if (x == last) return;\n"
                                             "    last = x;\n" + LAUNCH), "static variable"),
    "__device__ cache": (source(LAUNCH, head="__device__ float cache[1 << 20];"), "__device__"),
    "__managed__ flag": (source(LAUNCH, head="__managed__ int calls;"), "__managed__"),
    "__constant__ table": (source(LAUNCH, head="__constant__ float table[16];"), "__constant__"),
    "device malloc": (source(LAUNCH, kernels=RELU_KERNEL.replace("if (i < n)", "float* t = (float*)malloc(4); "
                                                                 "if (i < n)")), "allocates memory"),
    "torch": (source(LAUNCH, head="#include <torch/extension.h>"), "reference library"),
    "cuBLAS": (source(LAUNCH, head="#include <cublas_v2.h>"), "reference library"),
    "cub": (source(LAUNCH, head="#include <cub/cub.cuh>"), "reference library"),
    "half precision header": (source(LAUNCH, head="#include <cuda_fp16.h>"), "half precision"),
    "half precision type": (source(LAUNCH, kernels=RELU_KERNEL.replace(
        "if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;", "__half h = x[i]; out[i] = h > 0 ? h : 0;")),
        "half precision"),
    "inline PTX": (source(LAUNCH, kernels=RELU_KERNEL.replace("int i =", "asm volatile(\"membar.gl;\");\n    int i ="))
                   , "inline assembly"),
    "device clock": (source(LAUNCH, kernels=RELU_KERNEL.replace("int i =", "long long t = clock64();\n    int i ="))
                     , "clock"),
    "patched host timer": (source(LAUNCH, head="int clock_gettime(int c, void* t) { return 0; }"), "clock"),
    "printf": (source('    printf("hi");\n' + LAUNCH), "console"),
    "cudaMemcpy to compute on the host": (source("    float h[16];\n    cudaMemcpy(h, x, 64, cudaMemcpyDeviceToHost);\n"
                                                 + LAUNCH), "calls cudaMemcpy"),
    "device limits": (source("    cudaDeviceSetLimit(cudaLimitStackSize, 1 << 20);\n" + LAUNCH),
                      "calls cudaDeviceSetLimit"),
    "device reset": (source(LAUNCH + "\n    cudaDeviceReset();"), "calls cudaDeviceReset"),
    "token pasting": (source(LAUNCH, head="#define MAKE(a, b) a##b"), "##"),
    "extern declaration (the Python C API)": (source('    PyRun_SimpleString("import torch");\n' + LAUNCH,
                                                     head='extern "C" int PyRun_SimpleString(const char*);'), "extern"),
    "missing host function": (RELU_KERNEL, "must define the host function"),
    "host function defined twice": (source() + source(kernels=""), "2 times"),
    "host function as a __global__ kernel": (source(kernels="", signature="__global__ " + SIG,
                                                    body="    int i = threadIdx.x; if (i < n) out[i] = x[i];"),
                                             "not a __global__"),
    "non-const input (another signature)": (source(signature=SIG.replace("const float* x", "float* x")),
                                            "the task's signature"),
    "no __global__ kernel": (source("    cudaMemset(out, 0, n * sizeof(float));", kernels=""), "no __global__"),
    "OpenMP pragma": (source(LAUNCH, head="#pragma omp parallel"), "#pragma"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_every_hostile_candidate_is_refused_at_the_static_stage(name):
    text, message = HOSTILE[name]
    verdict = verify(RELU, reply(text), shape="smoke", backend="cuda")  # no GPU needed: it stops before nvcc
    assert verdict.stage == "static", (verdict.stage, verdict.message)
    assert message in verdict.message, verdict.message
    assert verdict.reward == INVALID and not verdict.correct and verdict.flags


IDIOMATIC = """#include <cuda_runtime.h>
#include <math.h>
// not a stream: cudaStreamCreate, new buffers or free memory in a comment are fine
static constexpr int BLOCK = 256;
static const float SLOPE = 0.0f;

static __device__ __forceinline__ float relu1(float v) { return v > SLOPE ? v : 0.0f; }

template <int B>
__global__ void __launch_bounds__(B) relu_kernel(const float* __restrict__ x, float* __restrict__ out, int n) {
    extern __shared__ float tile[];
    int half = B / 2, half_width = half;
    int i = blockIdx.x * B + threadIdx.x;
    #pragma unroll 4
    for (int k = 0; k < 1; k++) tile[threadIdx.x] = i < n ? x[i] : 0.0f;
    __syncthreads();
    if (i < n) out[i] = relu1(tile[threadIdx.x]) + 0.0f * (half - half_width);
}

extern "C" void kernel(const float* __restrict__ x, float* out, const int n) {
    relu_kernel<BLOCK><<<(n + BLOCK - 1) / BLOCK, BLOCK, BLOCK * sizeof(float), 0>>>(x, out, n);
    cudaGetLastError();
}
"""


def test_idiomatic_cuda_passes_the_static_checks():
    """The checks refuse hacks, not idioms: comments, static helpers and constants, templates, launch bounds,
    dynamic shared memory, __restrict__, a variable named half, #pragma unroll, an explicit default stream."""
    assert cuda.static_problems(IDIOMATIC, SIG) == []


@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_every_tasks_naive_cuda_source_passes_the_static_checks(task):
    text = cuda.naive_cuda_source(task)
    assert cuda.static_problems(text, task.signature) == []
    assert cuda.extract_code(reply(text)) == text


def test_naive_sources_spread_the_outer_loops_over_threads_and_fall_back_to_one_thread():
    assert "int i = (int)index;" in cuda.naive_cuda_source(RELU)  # one thread per element
    matmul = cuda.naive_cuda_source(task_by_name("matmul_bias_relu"))
    assert "int i = (int)(index / p);" in matmul and "int j = (int)(index % p);" in matmul  # one per output
    softmax = cuda.naive_cuda_source(task_by_name("softmax"))
    assert "int r = (int)index;" in softmax and "for (int c = 1; c < cols; c++)" in softmax  # one per row
    while_loop = "    int i = 0;\n    while (i < n) { out[i] = x[i] > 0.0f ? x[i] : 0.0f; i++; }"
    loopless = dataclasses.replace(RELU, naive_c=while_loop)
    fallback = cuda.naive_cuda_source(loopless)
    assert "<<<1, 1>>>" in fallback and cuda.static_problems(fallback, SIG) == []


def test_unknown_backends_are_refused():
    with pytest.raises(ValueError, match="cpu_c"):
        verify(RELU, reply(source()), backend="triton")


def test_the_cuda_backend_refuses_to_go_on_where_it_cannot_run(monkeypatch):
    """A machine without nvcc or a GPU raises, naming the fix, instead of paying a candidate for the machine;
    the parse and static stages still run."""
    monkeypatch.setattr(cuda, "_backend", lambda: ("the cuda kernel backend needs nvcc; use backend='cpu_c'", ""))
    with pytest.raises(RuntimeError, match="backend='cpu_c'"):
        verify(RELU, reply(source()), shape="smoke", backend="cuda")
    assert verify(RELU, reply(HOSTILE["side stream"][0]), shape="smoke", backend="cuda").stage == "static"


def test_on_this_machine_without_a_gpu_verify_raises_an_actionable_error():
    problem = cuda.backend_problem()
    if problem is None:
        pytest.skip("this machine can run the cuda backend")
    assert "backend='cpu_c'" in problem
    with pytest.raises(RuntimeError, match="backend='cpu_c'"):
        verify(RELU, reply(source()), shape="smoke", backend="cuda")


# --- with nvcc, no GPU needed ------------------------------------------------------------------------------
@needs_nvcc
def test_a_compile_error_comes_back_with_the_candidates_own_line_numbers():
    result = cuda.compile_cuda(source("    int y = n >;\n" + LAUNCH), SIG, arch=ARCH)
    assert not result.ok and "error" in result.log and "kernel.cu(" in result.log, result.log


@pytest.mark.slow
@needs_nvcc
def test_compiled_libraries_are_cached_and_the_naive_kernels_link_clean():
    text = cuda.naive_cuda_source(RELU) + "// cache test\n"
    first, second = cuda.compile_cuda(text, SIG, arch=ARCH), cuda.compile_cuda(text, SIG, arch=ARCH)
    assert first.ok and second.cached and first.library == second.library
    for name in ("relu", "bias_relu_residual", "softmax", "matmul_bias_relu"):  # one per kind of loop nest
        task = task_by_name(name)
        built = cuda.compile_cuda(cuda.naive_cuda_source(task), task.signature, arch=ARCH)
        assert built.ok, built.log
        assert cuda.link_problems(built.library) == []


LINK_ONLY = {
    # what the static checks do not see (compiled directly, past them): name -> (source, message)
    "host global cache": (source(LAUNCH + "\n    cache[0] = 1.0f;", head="float cache[16];"), "writable data"),
    "anonymous-namespace cache": (source(LAUNCH + "\n    cache[0] = 1.0f;", head="namespace { float cache[16]; }"),
                                  "writable data"),
    "struct-typed cache keyed by size": (source("    if (state.last == n) return;\n    state.last = n;\n" + LAUNCH,
                                                head="struct { int last; } state;"), "writable data"),
    "__device__ variable": (source(LAUNCH, head="__device__ float cache[16];"), "__device__"),
    "another signature": (source(signature=SIG.replace("const float* x", "float* x")), "does not define `kernel`"),
}


@needs_nvcc
@pytest.mark.parametrize("name", list(LINK_ONLY))
def test_the_link_check_catches_state_and_signatures_from_the_object_file(name):
    text, message = LINK_ONLY[name]
    built = cuda.compile_cuda(text, SIG, arch=ARCH)
    assert built.ok, built.log
    problems = cuda.link_problems(built.library)
    assert any(message in p for p in problems), problems


# --- with nvcc and a GPU -----------------------------------------------------------------------------------
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_every_tasks_naive_cuda_kernel_is_correct(gpu, task):
    verdict = verify(task, reply(cuda.naive_cuda_source(task)), shape="smoke", timing=False, backend="cuda")
    assert verdict.correct, (verdict.stage, verdict.message)


IN_PLACE = ("__global__ void relu_kernel(float* x, float* out, int n) {\n"
            "    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
            "    if (i < n) { x[i] = x[i] > 0.0f ? x[i] : 0.0f; out[i] = x[i]; }\n}\n")
FAULTY = {
    # name: (host function body, kernels, substrings of which the message holds one); all stop at correctness
    "wrong": (LAUNCH, RELU_KERNEL.replace("0.0f ? x[i] : 0.0f", "0.0f ? x[i] : 1.0f"), ("values wrong",)),
    "writes nothing": ("    relu_kernel<<<1, 1>>>(x, out, 0);", RELU_KERNEL, ("values wrong",)),
    "illegal address": (LAUNCH, RELU_KERNEL.replace("out[i] =", "out[i + (1 << 30)] ="), ("CUDA error", "crashed")),
    "too many threads per block": ("    relu_kernel<<<1, 4096>>>(x, out, n);", RELU_KERNEL, ("launch failed",)),
    "mutates its inputs": ("    relu_kernel<<<(n + 255) / 256, 256>>>((float*)x, out, n);", IN_PLACE,
                           ("changed its inputs",)),
}


@pytest.mark.parametrize("name", list(FAULTY))
def test_faulty_kernels_earn_nothing_and_crash_nothing(gpu, name):
    body, kernels, messages = FAULTY[name]
    verdict = verify(RELU, reply(source(body, kernels=kernels)), shape="smoke", timing=False, backend="cuda")
    assert verdict.stage == "correctness", (verdict.stage, verdict.message)
    assert any(m in verdict.message for m in messages), verdict.message
    assert verdict.reward == INCORRECT and not verdict.correct
    assert ("mutated_inputs" in verdict.flags) == (name == "mutates its inputs")


def test_a_hanging_kernel_times_out_and_the_gpu_still_works_after(gpu):
    spin = RELU_KERNEL.replace("if (i < n)", "while (x[0] == x[0]) { out[0] += 1.0f; }\n    if (i < n)")
    start = time.perf_counter()
    verdict = verify(RELU, reply(source(kernels=spin)), shape="smoke", timing=False, backend="cuda")
    assert time.perf_counter() - start < cuda.RUN_TIMEOUT_S + 30, "a verdict must come within the timeout"
    assert verdict.stage == "correctness" and verdict.reward == INCORRECT, verdict.message
    after = verify(RELU, reply(cuda.naive_cuda_source(RELU)), shape="smoke", timing=False, backend="cuda")
    assert after.correct, after.message


SLOW_KERNEL = RELU_KERNEL.replace(  # correct: 0 * a finite sum is 0 (no fast-math), but 4000 square roots a thread
    "if (i < n) out[i] = x[i] > 0.0f ? x[i] : 0.0f;",
    "float v = x[i < n ? i : 0], busy = 0.0f;\n    for (int r = 0; r < 4000; r++) busy += sqrtf(fabsf(v) + r);\n"
    "    v += 0.0f * busy;\n    if (i < n) out[i] = v > 0.0f ? v : 0.0f;")


def test_work_left_on_a_side_stream_is_inside_the_timing(gpu):
    """Past the static checks (compiled directly), a kernel on a non-blocking side stream is still timed in
    full: the same slow kernel on the default stream and on a side stream take about the same time."""
    on_default = cuda.compile_cuda(source(kernels="#include <math.h>\n" + SLOW_KERNEL), SIG)
    on_side = cuda.compile_cuda(source(SIDE_STREAM, kernels="#include <math.h>\n" + SLOW_KERNEL), SIG)
    assert on_default.ok and on_side.ok, (on_default.log, on_side.log)
    on_default_timed = time_candidate(RELU, on_default.library, "gpu", repeats=5, backend="cuda")
    on_side_timed = time_candidate(RELU, on_side.library, "gpu", repeats=5, backend="cuda")
    assert not isinstance(on_default_timed, str) and not isinstance(on_side_timed, str), (on_default_timed,
                                                                                          on_side_timed)
    assert on_side_timed[0] > 0.5 * on_default_timed[0], (on_side_timed, on_default_timed)


def test_a_correct_kernel_is_timed_against_the_reference_on_the_gpu_and_paid_by_tier(gpu):
    verdict = verify(RELU, reply(cuda.naive_cuda_source(RELU)), shape="gpu", backend="cuda")
    assert verdict.correct and verdict.stage == "done", verdict.message
    assert verdict.speedup is not None and 0.1 < verdict.speedup < 10, verdict.message  # the same memory traffic
    assert verdict.reward == tiered_reward(verdict.speedup)


def test_a_deliberately_slow_correct_kernel_earns_the_slower_tier_on_the_gpu(gpu):
    slow = source(kernels="#include <math.h>\n" + SLOW_KERNEL)
    verdict = verify(RELU, reply(slow), shape="gpu", backend="cuda")
    assert verdict.correct and verdict.speedup < 1.0, verdict.message
    assert verdict.reward == CORRECT_BUT_SLOWER
