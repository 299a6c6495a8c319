"""Kernel-generation RL, cpu_c backend: every stage alone, the tiered reward, and a fixed suite of candidates —
correct, slow, wrong, broken, hostile, and one per known reward hack — none of which may earn a positive
reward by cheating or crash the caller."""

from __future__ import annotations

import shutil
import time

import numpy as np
import pytest

from agentrl_lite.tasks.kernels import TASKS, cpu_c, extract_code, task_by_name, tiered_reward, verify
from agentrl_lite.tasks.kernels import stages as verify_module
from agentrl_lite.tasks.kernels.stages import (
    COMPILE_FAILED,
    CORRECT_BUT_SLOWER,
    INCORRECT,
    INVALID,
    correctness_inputs,
    reference_outputs,
)

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="the cpu_c backend needs gcc")
RELU = task_by_name("relu")
SIG = RELU.signature


def reply(body: str, head: str = "#include <math.h>\n", signature: str = SIG) -> str:
    return f"Here is the kernel.\n```c\n{head}\n{signature} {{\n{body}\n}}\n```"


def test_the_catalog_in_kernelbench_format_with_a_split():
    assert len(TASKS) >= 20 and len({t.name for t in TASKS}) == len(TASKS)
    assert {t.split for t in TASKS} == {"train", "validation", "heldout"}
    namespace: dict = {}
    exec(RELU.reference_source("smoke"), namespace)
    assert {"Model", "get_inputs", "get_init_inputs"} <= set(namespace)
    assert RELU.signature == "void kernel(const float* x, float* out, int n)"


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS, ids=lambda t: t.name)
def test_every_tasks_naive_kernel_is_correct(task):
    verdict = verify(task, f"```c\n{task.naive_source()}```", shape="smoke", timing=False)
    assert verdict.correct, (verdict.stage, verdict.message)


def test_parse_takes_the_last_c_block():
    assert extract_code("```c\nint a;\n```\ntext\n```c\nint b;\n```") == "int b;\n"
    assert extract_code("no code here") is None
    assert verify(RELU, "I would write a loop.").stage == "parse"


def test_the_reference_runs_in_another_process_and_the_shifted_set_is_shifted():
    inputs = correctness_inputs(RELU, "smoke")
    assert len(inputs) == 8 and inputs[5][0].mean() > 2.0  # five seeded, × 10 + 3, extremes, odd sizes
    outputs = reference_outputs(RELU, "smoke")
    assert np.allclose(outputs[0], np.maximum(inputs[0][0], 0))


def test_tiers_rise_with_speed_and_failures_rank_by_stage():
    assert tiered_reward(0.5) == CORRECT_BUT_SLOWER
    assert [tiered_reward(s) for s in (1.0, 1.2, 1.5, 2.0, 5.0)] == sorted(tiered_reward(s) for s in (1.0, 1.2, 1.5, 2.0, 5.0))
    assert tiered_reward(1.0) > CORRECT_BUT_SLOWER > 0 > INCORRECT > COMPILE_FAILED > INVALID


GOOD = "    for (int i = 0; i < n; i++) out[i] = x[i] > 0.0f ? x[i] : 0.0f;"

CANDIDATES = {
    # name: (reply, the stage it must stop at, a substring of the message)
    "wrong": (reply("    for (int i = 0; i < n; i++) out[i] = x[i];"), "correctness", "values wrong"),
    "writes nothing (reuses whatever is in the output buffer)": (reply("    (void)x; (void)n;"), "correctness",
                                                                  "values wrong"),
    "hard-coded output": (reply("    for (int i = 0; i < n; i++) out[i] = 0.5f;"), "correctness", "values wrong"),
    "compile error": (reply("    for (int i = 0; i < n; i++) out[i] = x[i] >;"), "compile", "error"),
    "infinite loop": (reply("    for (;;) { out[0] += 1.0f; }"), "correctness", ""),
    "segfault": (reply("    *(volatile float*)16 = x[0];"), "correctness", "crashed"),
    "writes far outside its output": (reply("    for (long i = 0; i < 1L << 34; i += 4096) out[i] = 1.0f;"), "correctness", ""),
    "huge stack allocation": (reply("    float buffer[1 << 28]; buffer[n] = 1.0f; out[0] = buffer[n];"),
                              "correctness", ""),
    "malloc (stdlib.h is not allowed)": (reply("    float* b = malloc(1L << 40); out[0] = b[0];",
                                               head="#include <stdlib.h>\n"), "static", "stdlib.h"),
    "mutates its inputs": (reply("    float* y = (float*)x;\n    for (int i = 0; i < n; i++) { y[i] = y[i] > 0 ? y[i] : 0; "
                                 "out[i] = y[i]; }"), "correctness", "changed its inputs"),
    "calls the Python C API (implicitly declared)": (reply(f"    PyRun_SimpleString(\"import torch\");\n{GOOD}"),
                                                     "link", "PyRun_SimpleString"),
    "calls the Python C API (extern)": (reply(GOOD, head="extern int PyRun_SimpleString(const char*);\n"),
                                        "static", "extern"),
    "runs a shell": (reply(f"    system(\"python -c 1\");\n{GOOD}"), "static", "OS"),
    "static cache keyed by size": (reply("    static int last = -1;\n    if (n == last) return;\n    last = n;\n" + GOOD),
                                   "static", "static variable"),
    "global cache": (reply(GOOD.replace("out[i] = ", "cache[i % 16] = out[i] = "), head="float cache[16];\n"),
                     "link", "writable global data"),
    "patched timer": (reply(GOOD, head="int clock_gettime(int c, void* t) { return 0; }\n"), "static", "clock"),
    "half precision (dtype downgrade)": (reply("    for (int i = 0; i < n; i++) { _Float16 h = x[i]; "
                                               "out[i] = h > 0 ? h : 0; }"), "static", "half-precision"),
    "constructor that runs at load": (reply(GOOD, head="__attribute__((constructor)) void boot(void) {}\n"),
                                      "static", "__attribute__"),
    "threads": (reply(GOOD, head="#include <pthread.h>\n"), "static", "pthread.h"),
    "wrong signature": (reply(GOOD, signature="void kernel(float* x, float* out, int n)"), "correctness", ""),
    "no kernel function": ("```c\nvoid relu(const float* x, float* out, int n) {}\n```", "static", "exactly once"),
}


@pytest.mark.parametrize("name", list(CANDIDATES))
def test_the_candidate_suite_earns_nothing_and_crashes_nothing(name, monkeypatch):
    monkeypatch.setattr(cpu_c, "RUN_TIMEOUT_S", 2.0)  # read per call: the infinite loop runs to 2 s, not 10
    text, stage, message = CANDIDATES[name]
    start = time.perf_counter()
    verdict = verify(RELU, text, shape="smoke", timing=False)
    assert time.perf_counter() - start < cpu_c.RUN_TIMEOUT_S + 5, "a verdict must come within the timeout"
    if name == "wrong signature":  # a non-const input is the same ABI: it is simply a correct kernel
        assert verdict.correct
        return
    assert verdict.stage == stage, (verdict.stage, verdict.message)
    assert message in verdict.message, verdict.message
    assert verdict.reward <= 0 and not verdict.correct


def test_a_correct_kernel_is_timed_against_the_reference_and_paid_by_tier():
    verdict = verify(RELU, reply(GOOD), shape="cpu")
    assert verdict.correct and verdict.stage == "done", verdict.message
    assert verdict.speedup is not None and 0.05 < verdict.speedup < 50
    assert verdict.reward == tiered_reward(verdict.speedup)
    metrics = verdict.metrics()
    assert metrics["fast_0"] == 1.0 and metrics["fast_1"] == float(verdict.speedup > 1.0)


def test_a_deliberately_slow_correct_kernel_earns_the_slower_tier():
    slow = ("    for (int i = 0; i < n; i++) {\n        float v = 0.0f;\n"
            "        for (int r = 0; r < 64; r++) { volatile float t = x[i]; v = t > 0.0f ? t : 0.0f; }\n"
            "        out[i] = v;\n    }")
    verdict = verify(RELU, reply(slow), shape="cpu")
    assert verdict.correct and verdict.speedup < 1.0, verdict.message
    assert verdict.reward == CORRECT_BUT_SLOWER


def test_a_suspicious_speedup_is_retimed_and_the_lower_one_paid(monkeypatch):
    timings = iter([(1e-6, 1e-3), (2e-4, 1e-3)])  # 1000x, then 5x on the second input set
    monkeypatch.setattr(verify_module, "time_candidate", lambda *a, **k: next(timings))
    verdict = verify(RELU, reply(GOOD), shape="smoke")
    assert "suspicious_speedup" in verdict.flags
    assert verdict.speedup == pytest.approx(5.0) and verdict.reward == tiered_reward(5.0)


def test_compiled_libraries_are_cached_by_source():
    source = extract_code(reply(GOOD + "\n    /* cache test */"))
    first, second = cpu_c.compile_c(source), cpu_c.compile_c(source)
    assert first.ok and second.ok and second.cached and first.library == second.library


def test_the_environment_scores_an_episode_with_the_verdict():
    from agentrl_lite.env import Environment
    from agentrl_lite.episode import Episode, Turn
    from agentrl_lite.tasks.kernels.env import KernelEnv, kernel_tasks

    env = KernelEnv(shape="smoke", timing=False)
    assert isinstance(env, Environment)
    task = next(t for t in kernel_tasks("train") if t["name"] == "relu")
    assert RELU.signature in env.prompt(task)[1]["content"] and env.toolbox_for(task) is None
    assert {t["name"] for t in kernel_tasks("heldout")}.isdisjoint(t["name"] for t in kernel_tasks("train"))
    right = Episode(prompt=[], turns=[Turn("prompt", 0, 0, ""), Turn("model", 0, 0, "", content=reply(GOOD))])
    wrong = Episode(prompt=[], turns=[Turn("prompt", 0, 0, ""), Turn("model", 0, 0, "", content="no code")])
    assert env.score(task, right)["correct"] == 1.0
    assert env.score(task, wrong)["reward"] == INVALID


def test_a_static_helper_function_is_allowed():
    helper = reply("    for (int i = 0; i < n; i++) out[i] = relu1(x[i]);",
                   head="#include <math.h>\nstatic inline float relu1(float v) { return v > 0.0f ? v : 0.0f; }\n")
    assert verify(RELU, helper, shape="smoke", timing=False).correct


def test_the_link_check_alone_catches_a_static_cache_keyed_by_pointer():
    """Defence in depth: with the static check bypassed, a `static` inside the function (a cache keyed by the
    input pointer, fast on every repeated timing call) is still refused, from the library's full symbol table."""
    cached = ("void kernel(const float* x, float* out, int n) {\n    static const float* last = 0;\n"
              "    if (x == last) return;\n    last = x;\n" + GOOD + "\n}\n")
    plain = f"void kernel(const float* x, float* out, int n) {{\n{GOOD}\n}}\n"
    assert "static variable" in "; ".join(cpu_c.static_problems(cached, SIG))
    assert any("writable static data (last" in p for p in cpu_c.link_problems(cpu_c.compile_c(cached).library))
    assert cpu_c.link_problems(cpu_c.compile_c(plain).library) == []


def test_held_out_families_are_never_trained_on_and_validation_constants_are_new():
    by_split = {s: [t for t in TASKS if t.split == s] for s in ("train", "validation", "heldout")}
    train_families = {t.family for t in by_split["train"]}
    assert [task_by_name(n).family for n in ("leaky_0p1", "affine_1p5_1p5", "row_sum", "row_sum_scale_0p5")] == [
        "leaky", "affine", "row_sum", "row_sum_scale"]
    assert not {t.family for t in by_split["heldout"]} & train_families
    assert {t.family for t in by_split["validation"]} <= train_families
    train_descriptions = {t.description for t in by_split["train"]}
    assert not any(t.description in train_descriptions for t in by_split["validation"])
    # the constant is in the description and in the code, nowhere else the policy could copy it from
    scale = task_by_name("scale_0p75")
    assert "0.75" in scale.description and "0.75f" in scale.naive_c and scale.split == "validation"


def test_the_environment_verifies_a_kernel_once_and_pays_it_as_a_reward(monkeypatch):
    import agentrl_lite.tasks.kernels.env as env_module
    from agentrl_lite.tasks.kernels.env import KernelEnv, demonstration

    calls = []
    real = env_module.verify
    monkeypatch.setattr(env_module, "verify", lambda *a, **k: calls.append(a[1]) or real(*a, **k))
    env = KernelEnv(shape="smoke", timing=False)
    same_kernel_other_prose = [reply(GOOD), reply(GOOD).replace("Here is the kernel.", "Done:")]
    other = reply("    for (int i = 0; i < n; i++) out[i] = x[i];")
    rewards = env.reward(None, [*same_kernel_other_prose, other], name=["relu"] * 3)
    assert rewards == [CORRECT_BUT_SLOWER, CORRECT_BUT_SLOWER, INCORRECT]
    assert len(calls) == 2, "one verification per distinct kernel: equal kernels get equal rewards"
    with pytest.raises(ValueError, match="name"):
        env.reward(None, [other])
    assert verify(RELU, demonstration({"name": "relu"}), shape="smoke", timing=False).correct


def test_the_cold_start_shows_the_named_operators_and_leaves_their_variants_to_rl():
    from agentrl_lite.tasks.kernels.env import cold_start_split, kernel_tasks

    demonstrated, practised = cold_start_split(kernel_tasks("train"))
    assert len(demonstrated) + len(practised) == len(kernel_tasks("train")) and practised
    assert all(t["family"] == t["name"] for t in demonstrated) and all(t["family"] != t["name"] for t in practised)
    assert {"relu", "sigmoid", "row_sum"} <= {t["name"] for t in demonstrated}
    assert {"scale_3", "scaled_sigmoid_0p5"} <= {t["name"] for t in practised}


def test_the_reference_is_timed_without_a_page_fault_per_call():
    """The reference allocates its output on every call; glibc's defaults can map fresh pages for it each time, and
    then the timing measures page faults (about 570 a call for relu at the cpu shape), not PyTorch."""
    from agentrl_lite.tasks.kernels import children, harness
    from agentrl_lite.tasks.kernels.stages import SHAPES, draw_inputs

    dims = SHAPES["cpu"]
    sets = [draw_inputs(RELU, dims, 7 + k) for k in range(4)]
    calls = harness.schedule(4, 4, shuffle=True)
    status, (seconds, outputs, faults) = children.run_in_child(
        children.reference_timing_child, (RELU.reference_source("cpu"), sets, calls, 3))
    assert status == "ok" and seconds > 0 and len(outputs) == 4
    assert faults < 10 * (len(calls) - 3), f"{faults} page faults in {len(calls) - 3} timed calls"
