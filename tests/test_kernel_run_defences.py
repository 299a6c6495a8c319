"""The run side of the kernel verifier, layer by layer, against hostile candidates of our own.

The candidates here are compiled with plain gcc (no static check, no link check, any header), so what stops them
is the layer under test alone: the sandbox (`sandbox.run_command`), the harness's seccomp filters and guarded
buffers (harness.c), and the stages' input sets and checks (stages.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from agentrl_lite import sandbox
from agentrl_lite.tasks.kernels import TASKS, stages, task_by_name
from agentrl_lite.tasks.kernels.catalog import SHAPES, KernelTask

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the cpu_c backend needs gcc")
REPO_ROOT = Path(__file__).resolve().parents[1]
RELU, SIGMOID = task_by_name("relu"), task_by_name("sigmoid")
RELU_BODY = "for (int i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;"


def _backends() -> list[str]:
    names = []
    for name in ("bwrap", "unshare"):
        if not isinstance(sandbox._select_backend(name), str):
            names.append(name)
    return names


ISOLATING = _backends()


@pytest.fixture(params=ISOLATING or [pytest.param("none", marks=pytest.mark.skip("no isolating backend"))])
def backend(request, monkeypatch):
    """Every isolating sandbox backend this machine has, in turn."""
    monkeypatch.setenv("AGENTRL_SANDBOX", request.param)
    return request.param


@pytest.fixture
def markers(tmp_path):
    """Host paths a candidate must not be able to create: in /tmp, in $HOME and in the checkout."""
    tag = f"agentrl_escape_{os.getpid()}_{time.monotonic_ns()}"
    paths = [Path("/tmp") / tag, Path.home() / tag, REPO_ROOT / tag]
    yield paths
    for path in paths:
        path.unlink(missing_ok=True)


def build(source: str, folder: Path) -> str:
    """A shared library from `source` with plain gcc: no static or link check stands in the way."""
    src, library = folder / "candidate.c", folder / f"candidate_{time.monotonic_ns()}.so"
    src.write_text(source)
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", str(src), "-o", str(library), "-lm"], check=True)
    return str(library)


def relu_kernel(before: str = "", head: str = "") -> str:
    return (f"#define _GNU_SOURCE\n#include <math.h>\n#include <stdint.h>\n{head}\n"
            f"void kernel(const float* x, float* out, int n) {{\n{before}\n    {RELU_BODY}\n}}\n")


def processes_holding(text: str) -> list[int]:
    """Pids of host processes whose command line mentions `text`."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and text.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                pids.append(int(entry))
        except OSError:
            continue
    return pids


def first_value(task, seed: int) -> float:
    """x[0] of the input set PyTorch draws for `task` at the smoke shape with this seed."""
    return float(stages.draw_inputs(task, SHAPES["smoke"], seed)[0].flat[0])


# --- 1. isolation: files, processes, network, data/ ----------------------------------------------------------
def test_the_sandbox_alone_shows_no_checkout_and_keeps_no_write_process_or_socket(backend, markers):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    data = REPO_ROOT / "data" / "arithmetic_heldout.jsonl"
    script = (f"for f in {' '.join(map(str, markers))}; do echo x > $f; done 2>/dev/null; "
              f"(sleep 1; echo late > {markers[0]}) & "
              f"head -c 20 {data} 2>/dev/null && echo READ; ls {data.parent} 2>/dev/null && echo LISTED; "
              f"(echo hi > /dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED; echo done")
    with tempfile.TemporaryDirectory() as scratch:
        done = sandbox.run_command(["bash", "-c", script], writable=scratch, timeout_s=10)
    listener.close()
    assert done.returncode == 0 and b"done" in done.stdout, done
    assert b"READ" not in done.stdout and b"LISTED" not in done.stdout and b"CONNECTED" not in done.stdout
    time.sleep(1.5)  # the background writer would have written by now
    assert not any(m.exists() for m in markers)


def test_a_kernel_that_writes_files_at_load_and_call_changes_nothing(backend, markers, tmp_path):
    opens = "".join(f'    {{ int fd = open("{m}", O_CREAT | O_WRONLY, 0644); if (fd >= 0) close(fd); }}\n'
                    for m in markers)
    source = relu_kernel(before=opens, head=("#include <fcntl.h>\n#include <unistd.h>\n"
                                             f"__attribute__((constructor)) static void boot(void) {{\n{opens}}}\n"))
    correct, message, _ = stages.check_correctness(RELU, build(source, tmp_path), "smoke")
    assert not any(m.exists() for m in markers), message
    assert not correct and "system call" in message, message  # the call's open() is fatal


def test_a_kernel_that_forks_cannot_and_leaves_no_process(backend, markers, tmp_path):
    fork = f'    if (fork() == 0) {{ sleep(1); int fd = creat("{markers[0]}", 0644); (void)fd; _exit(0); }}\n'
    library = build(relu_kernel(before=fork, head="#include <fcntl.h>\n#include <unistd.h>\n"), tmp_path)
    correct, message, _ = stages.check_correctness(RELU, library, "smoke")
    time.sleep(1.5)
    assert not markers[0].exists() and not processes_holding(library)
    assert not correct, message


def test_what_a_kernel_tries_while_loading_fails(backend, markers, tmp_path):
    """A load-time constructor (before the strict filter): no file written, no process, no socket, no data/.
    It computes ReLU correctly only when every attempt failed, so the verdict says whether one succeeded."""
    data = REPO_ROOT / "data" / "arithmetic_heldout.jsonl"
    head = ("#include <fcntl.h>\n#include <unistd.h>\n#include <sys/socket.h>\n#include <netinet/in.h>\n"
            "static int escaped;\n__attribute__((constructor)) static void boot(void) {\n"
            f'    int fd = open("{markers[1]}", O_CREAT | O_WRONLY, 0644); if (fd >= 0) escaped |= 1;\n'
            f'    char c; fd = open("{data}", O_RDONLY); if (fd >= 0 && read(fd, &c, 1) == 1) escaped |= 2;\n'
            "    int s = socket(AF_INET, SOCK_STREAM, 0); if (s >= 0) escaped |= 4;\n"
            "    pid_t child = fork(); if (child == 0) _exit(0); if (child > 0) escaped |= 8;\n}\n")
    library = build(relu_kernel(before="    if (escaped) { out[0] = -1.0f - escaped; return; }", head=head),
                    tmp_path)
    correct, message, _ = stages.check_correctness(RELU, library, "smoke")
    assert correct, message
    assert not any(m.exists() for m in markers)


def test_the_seccomp_filter_alone_stops_a_write_without_the_sandbox(monkeypatch, markers, tmp_path):
    """Under the unsafe opt-out (no filesystem isolation) the harness's filter still kills a kernel's open()."""
    monkeypatch.setenv("AGENTRL_SANDBOX", "rlimit")
    source = relu_kernel(before=f'    int fd = creat("{markers[0]}", 0644); (void)fd;',
                         head="#include <fcntl.h>\n")
    with pytest.warns(RuntimeWarning):
        sandbox._select_backend.cache_clear()
        correct, message, _ = stages.check_correctness(RELU, build(source, tmp_path), "smoke")
    sandbox._select_backend.cache_clear()
    assert not correct and not markers[0].exists(), message


def test_a_hanging_kernel_is_stopped_within_the_bound_and_leaves_nothing(backend, tmp_path, monkeypatch):
    monkeypatch.setattr(stages.cpu_c, "RUN_TIMEOUT_S", 2.0)  # the bound is read per call: 2 s, not 10, in a test
    library = build(relu_kernel(before="    for (volatile int spin = 1; spin;) {}"), tmp_path)
    start = time.perf_counter()
    correct, message, _ = stages.check_correctness(RELU, library, "smoke")
    assert time.perf_counter() - start < stages.cpu_c.RUN_TIMEOUT_S + 5
    assert not correct and "did not finish" in message
    assert not processes_holding(library)


# --- 2. no Python where the candidate runs ---------------------------------------------------------------------
def test_a_kernel_finds_no_python_to_run_code_in(tmp_path):
    """The old children held an interpreter: a kernel could run Python in the verifier through its C API."""
    head = ("#include <dlfcn.h>\nstatic int found;\n__attribute__((constructor)) static void boot(void) {\n"
            '    found = dlsym(RTLD_DEFAULT, "PyRun_SimpleString") != 0 || dlsym(RTLD_DEFAULT, "Py_Initialize") != 0;\n'
            "}\n")
    library = build(relu_kernel(before="    if (found) { out[0] = -1.0f; return; }", head=head), tmp_path)
    correct, message, _ = stages.check_correctness(RELU, library, "smoke")
    assert correct, message


def test_a_kernel_that_writes_to_the_verifiers_channel_is_refused(tmp_path):
    """Whatever a kernel writes to the harness's output breaks the fixed-size record format: refused, not read."""
    forged = ("    static const unsigned record[4] = {1, 0, 1, 0};\n"
              "    if (write(1, record, sizeof record) < 0) out[0] = 0.0f;")
    library = build(relu_kernel(before=forged, head="#include <unistd.h>\n"), tmp_path)
    correct, message, _ = stages.check_correctness(RELU, library, "smoke")
    assert not correct, message


# --- 3b. no state survives between calls on the stack --------------------------------------------------------
def test_a_cache_kept_below_the_stack_frame_does_not_survive_between_calls(tmp_path):
    """The kernel remembers the input pointer 256 KB below its frame; on a hit it would skip the work and write a
    wrong value. Zeroing the stack and moving the frame before every call leave it nothing to find."""
    cache = ("    volatile uintptr_t* slot = (volatile uintptr_t*)((char*)__builtin_frame_address(0) - (256 << 10));\n"
             "    if (slot[0] == ((uintptr_t)x ^ 0x5a5a5a5aUL)) { out[0] = -7.0f; return; }\n"
             "    slot[0] = (uintptr_t)x ^ 0x5a5a5a5aUL;")
    library = build(relu_kernel(before=cache), tmp_path)
    timed = stages.time_candidate(RELU, library, "smoke", warmup=2, repeats=8)
    assert isinstance(timed, tuple), timed


# --- 4. a timed call looks like any other --------------------------------------------------------------------
def test_a_kernel_cannot_zero_its_inputs_while_timed(tmp_path):
    """It zeroes its input when it sees the first value of the old fixed timing seed (100), so the reference
    then reads zeros too. Inputs are read-only during every call, timed or not."""
    zero = (f"    if (x[0] == {first_value(RELU, 100)!r}f) {{ float* w = (float*)x; "
            "for (int i = 0; i < n; i++) { w[i] = 0.0f; out[i] = 0.0f; } return; }")
    library = build(relu_kernel(before=zero), tmp_path)
    timed = stages.time_candidate(RELU, library, "smoke", warmup=2, repeats=8, seed=100)
    assert isinstance(timed, str) and "inputs" in timed, timed


def test_a_kernel_right_only_on_inputs_it_memorised_fails_the_timing(tmp_path):
    """Right on the correctness sets and the old timing seeds (100, 101), garbage elsewhere: the timing sets are
    drawn per verification and every timed output is checked."""
    known = [first_value(RELU, s) for s in (*stages.CORRECTNESS_SEEDS, 100, 101)]
    known.append(known[0] * stages.SHIFT_SCALE + stages.SHIFT_OFFSET)
    test = " || ".join(f"x[0] == {v!r}f" for v in known) + " || x[0] == 0.0f || n != 4096"
    library = build(relu_kernel(before=f"    if (!({test})) {{ for (int i = 0; i < n; i++) out[i] = 1.0f; "
                                       "return; }"), tmp_path)
    assert stages.check_correctness(RELU, library, "smoke")[0]
    timed = stages.time_candidate(RELU, library, "smoke", warmup=2, repeats=8)
    assert isinstance(timed, str) and "wrong output" in timed, timed


# --- 5. coverage ---------------------------------------------------------------------------------------------
def test_a_kernel_wrong_for_large_magnitudes_and_inf_is_incorrect(tmp_path):
    source = ("#include <math.h>\nvoid kernel(const float* x, float* out, int n) {\n"
              "    for (int i = 0; i < n; i++) out[i] = fabsf(x[i]) < 50.0f ? 1.0f / (1.0f + expf(-x[i])) : 0.5f;\n}\n")
    correct, message, _ = stages.check_correctness(SIGMOID, build(source, tmp_path), "smoke")
    assert not correct and "extremes" in message, message


@pytest.mark.parametrize("loop", ["i < 4096", "i < (n & ~15)"], ids=["ignores n", "multiples of 16 only"])
def test_a_kernel_that_ignores_n_is_incorrect(loop, tmp_path):
    source = ("void kernel(const float* x, float* out, int n) {\n"
              f"    (void)n;\n    for (int i = 0; {loop}; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;\n}}\n")
    correct, message, _ = stages.check_correctness(RELU, build(source, tmp_path), "smoke")
    assert not correct, message


@pytest.mark.parametrize("where", ["out[n] = 0.0f;", "out[n + 1] = 0.0f;", "out[-1] = 0.0f;"])
def test_a_kernel_that_writes_past_its_output_is_caught(where, tmp_path):
    library = build(relu_kernel(before=f"    {where}"), tmp_path)
    correct, message, flags = stages.check_correctness(RELU, library, "smoke")
    assert not correct and ("outside its output" in message or "past the end" in message), message
    assert flags == ["out_of_bounds"]


def test_a_kernel_that_reads_past_its_input_is_caught(tmp_path):
    library = build(relu_kernel(before="    volatile float sink = x[n + 8]; (void)sink;"), tmp_path)
    correct, message, _ = stages.check_correctness(RELU, library, "smoke")
    assert not correct and "past the end" in message, message


def test_the_naive_kernels_pass_the_extremes_and_odd_sizes():
    """Every elementwise task gets the extremes set and every task the odd sizes; the naive kernels (NaN where an
    input is NaN is left unchecked) pass them. Checked for all tasks in test_kernels.py (slow)."""
    sets = stages.correctness_sets(RELU, "smoke")
    assert [s.sizes for s in sets][-1] == [stages.ODD_SIZES["n"]] and "extremes" in sets[-2].label
    assert np.isinf(sets[-2].inputs[0]).any() and np.isnan(sets[-2].inputs[0]).any()
    assert not stages.takes_extremes(task_by_name("softmax"))
    verdict = stages.verify(SIGMOID, f"```c\n{SIGMOID.naive_source()}```", shape="smoke", timing=False)
    assert verdict.correct, verdict.message


def test_a_correct_kernel_is_timed_in_the_harness_with_plausible_numbers(tmp_path):
    library = build(relu_kernel(), tmp_path)
    timed = stages.time_candidate(RELU, library, "smoke", warmup=2, repeats=8)
    assert isinstance(timed, tuple) and 0 < timed[0] < 0.01 and 0 < timed[1] < 0.01, timed


def test_without_an_isolating_backend_no_kernel_runs(monkeypatch, tmp_path):
    """Where neither bwrap nor unshare can isolate code, the verifier refuses as the Python tool does."""
    library = build(relu_kernel(), tmp_path)
    monkeypatch.delenv("AGENTRL_SANDBOX", raising=False)
    monkeypatch.setattr(sandbox, "_select_backend", lambda requested: "no sandbox can isolate code here (simulated)")
    with pytest.raises(sandbox.SandboxUnavailableError, match="simulated"):
        stages.check_correctness(RELU, library, "smoke")


def test_a_cache_keyed_by_the_last_calls_buffers_is_caught_in_every_timing(tmp_path):
    """Static state the link check would refuse, run anyway: every timing repeats one call's buffers at least
    once, the output is NaN before it, and the early return leaves the NaN."""
    cache = ("    static const float* last_x;\n    static float* last_out;\n"
             "    if (x == last_x && out == last_out) return;\n    last_x = x;\n    last_out = out;")
    library = build(relu_kernel(before=cache), tmp_path)
    assert stages.check_correctness(RELU, library, "smoke")[0]
    for _ in range(3):
        timed = stages.time_candidate(RELU, library, "smoke", warmup=1, repeats=2)
        assert isinstance(timed, str) and "wrong output" in timed, timed


# --- 6. precision: a result rounded to float16 is wrong, a sum in another order is not ------------------------
REORDERED_LOOPS = {"for (int c = 0; c < cols; c++)": "for (int c = cols - 1; c >= 0; c--)",
                   "for (int t = 0; t < k; t++)": "for (int t = k - 1; t >= 0; t--)"}
CLOSEST = ("row_sum", "matmul_bias_relu", "clamp_range_0p25")
"""the tasks with the least room between their correct kernels and the float16-rounded result: the row sum (the
finding), the matmul (no tolerance is 2x from both) and the elementwise task with the smallest outputs"""


def reordered(task: KernelTask) -> str:
    """A correct kernel that rounds otherwise than the naive one: every loop over a sum runs backwards; a task
    without a sum does its arithmetic in double (exp for expf, tanh for tanhf)."""
    body = task.naive_c
    for forwards, backwards in REORDERED_LOOPS.items():
        body = body.replace(forwards, backwards)
    if body == task.naive_c:
        for name, _ in task.inputs:
            body = body.replace(f"{name}[i]", f"(double){name}[i]")
        body = body.replace("float v = ", "double v = (double)")
        for function in ("expf", "tanhf", "fabsf"):
            body = body.replace(f"{function}(", f"{function[:-1]}(")
    return f"#include <math.h>\n\n{task.signature} {{\n{body}\n}}\n"


def rounded_to_float16(task: KernelTask) -> str:
    """The naive kernel, then every output rounded to nearest with 10 of float32's 23 mantissa bits (float16's
    precision) by integer operations on its bits: a silent dtype downgrade no static check can see."""
    if task.name.startswith("row_"):  # a row reduction: one value per row
        count = "rows"
    else:
        count = "m * p" if "m" in task.sizes else " * ".join(task.sizes)
    return (f"#include <math.h>\n#include <stdint.h>\n#include <string.h>\n\n{task.signature} {{\n{task.naive_c}\n"
            f"    for (long j = 0; j < (long)({count}); j++) {{\n        uint32_t u;\n"
            "        memcpy(&u, &out[j], sizeof u);\n        u = (u + 0x1000u) & ~0x1fffu;\n"
            "        memcpy(&out[j], &u, sizeof u);\n    }\n}\n")


@pytest.mark.parametrize("task", [pytest.param(t, marks=() if t.name in CLOSEST else pytest.mark.slow) for t in TASKS],
                         ids=lambda t: t.name)
def test_the_tolerance_pays_reordered_sums_and_refuses_a_float16_result(task):
    """Every stage (static and link checks included) on three kernels at the smoke shapes: the naive one and a
    reordered one are paid, the naive one with its output rounded to float16's precision is not."""
    for name, source in (("naive", task.naive_source()), ("reordered", reordered(task)),
                         ("float16-rounded", rounded_to_float16(task))):
        verdict = stages.verify(task, f"```c\n{source}```", shape="smoke", timing=False)
        if name == "float16-rounded":
            assert verdict.stage == "correctness" and not verdict.correct, (
                f"{task.name}: the float16-rounded result is paid at tolerance {task.tolerance:g}")
        else:
            assert verdict.correct, f"{task.name}: the {name} kernel is refused: {verdict.message}"
