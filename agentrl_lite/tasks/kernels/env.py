"""The kernel environment (an `Environment`): a task's operator and C signature in, a C kernel out, scored by
the whole verification pipeline (`verify`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl_lite.episode import Episode
from agentrl_lite.rewards import completion_text
from agentrl_lite.tasks.kernels import cuda
from agentrl_lite.tasks.kernels.catalog import TASKS, task_by_name
from agentrl_lite.tasks.kernels.stages import Verdict, extract_code, verify

SYSTEM_PROMPT = (
    "You write fast, correct C kernels. Reply with one ```c code block that defines exactly the requested "
    "function. Arrays are float32, row-major and contiguous. Only <math.h> is available; no other headers, no "
    "global or static variables, one thread."
)


def kernel_tasks(split: str | None = None) -> list[dict[str, Any]]:
    """The tasks as environment rows ({"name", "split", "family"}), all or one split."""
    return [{"name": t.name, "split": t.split, "family": t.family} for t in TASKS if split is None or t.split == split]


def cold_start_split(tasks: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(demonstrated, practised): the cold start shows the named operators (relu, sigmoid, row_sum, ...); the
    variants with constants in them (scale by 3, a sigmoid times 0.5, ReLU after a shift of 2) are left for RL,
    where copying the nearest demonstrated kernel gives a wrong output and only reading the description is paid.
    Probes with one or all constants of each family demonstrated left RL nothing to practise (docs/design/10_kernel_generation_rl.md)."""
    demonstrated = [t for t in tasks if t["family"] == t["name"]]
    return demonstrated, [t for t in tasks if t["family"] != t["name"]]


def demonstration(task: dict[str, Any], backend: str = "cpu_c") -> str:
    """The cold start's answer for a task: its naive kernel in a fenced block (correct, no speed tricks)."""
    spec = task_by_name(task["name"])
    if backend == "cuda":
        return f"```cuda\n{cuda.naive_cuda_source(spec)}```"
    return f"```c\n{spec.naive_source()}```"


def kernel_prompt_text(task: dict[str, Any], with_reference: bool = False, shape: str = "cpu") -> str:
    spec = task_by_name(task["name"])
    text = f"Task: {spec.description}.\nWrite: {spec.signature}"
    if with_reference:
        text += f"\nThe PyTorch reference:\n```python\n{spec.reference_source(shape)}```"
    return text


@dataclass
class KernelEnv:
    """Write a C kernel for an operator; the reward is the tiered verdict of `verify`.

    shape: the size set correctness and timing run at ("smoke" in tests, "cpu" for real timings).
    with_reference: also show the PyTorch reference in KernelBench's format (longer prompts).
    timing: time correct kernels against the reference (False: correctness only, a correct kernel earns the
        correct-but-slower reward).
    """

    shape: str = "cpu"
    with_reference: bool = False
    timing: bool = True
    backend: str = "cpu_c"
    """"cpu_c" (a C function, gcc, one CPU thread) or "cuda" (kernels and a host launcher, nvcc, a GPU)"""
    _verdicts: dict = field(default_factory=dict, repr=False, compare=False)

    def verdict(self, name: str, reply: str) -> Verdict:
        """`verify` on one reply, remembered per task and kernel source: a kernel sampled twice gets the same
        verdict. Timings vary from run to run; near a tier's threshold two copies of one kernel would otherwise
        earn different rewards, and GRPO would push the policy toward one copy and away from the other (noise
        turned into advantage). It also saves the verification of repeats, which are common after a cold start."""
        source = (extract_code(reply) if self.backend == "cpu_c" else cuda.extract_code(reply)) or reply
        key = (name, source)
        if key not in self._verdicts:
            self._verdicts[key] = verify(task_by_name(name), reply, self.shape, self.timing, self.backend)
        return self._verdicts[key]

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        system = cuda.SYSTEM_PROMPT if self.backend == "cuda" else SYSTEM_PROMPT
        return [{"role": "system", "content": system},
                {"role": "user", "content": kernel_prompt_text(task, self.with_reference, self.shape)}]

    def toolbox_for(self, task: dict[str, Any] | None = None) -> None:
        return None  # single turn: the reply is the kernel

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, float]:
        """The verdict's metrics: reward, correct (fast_0), compiled, fast_1, fast_1.2, speedup, flagged; the stage
        reached and the verifier's message go into `episode.metadata` for the trajectory viewer."""
        text = episode.model_turns[-1].content if episode.model_turns else ""
        verdict = self.verdict(task["name"], text)
        # what the trajectory viewer shows beside the kernel: the stage it reached and the verifier's words
        episode.metadata["stage"] = verdict.stage
        episode.metadata["verdict"] = verdict.message[:400]
        return verdict.metrics()

    def reward(self, prompts: list[Any], completions: list[Any], name: list[str] | None = None,
               **kwargs: Any) -> list[float]:
        """A TRL-style reward function: the tiered verdict's reward of each completion (needs the task's `name`
        column)."""
        if name is None or len(name) != len(completions):
            raise ValueError("KernelEnv.reward needs the per-sample column 'name' (the task's name)")
        return [self.verdict(n, completion_text(c)).reward
                for n, c in zip(name, completions, strict=True)]
