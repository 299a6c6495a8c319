"""The package's structure: no import cycles, the RL core apart from task families and course tooling, one
Environment protocol that every environment implements, and no probing of environments for methods."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import agentrl_lite
from agentrl_lite.env import Environment
from agentrl_lite.tasks.arithmetic import ArithmeticEnv
from agentrl_lite.tasks.function_calls import FunctionCallEnv

PACKAGE = Path(agentrl_lite.__file__).resolve().parent


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str) -> set[str]:
    """The package modules `name` imports anywhere in its file (top level or inside a function)."""
    path = MODULES[name]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        found |= {t for t in targets if t in MODULES and t != name}
    return found


GRAPH = {name: imports_of(name) for name in MODULES}


def test_the_package_has_no_import_cycle():
    done, on_path = set(), []

    def visit(name: str) -> None:
        if name in on_path:
            cycle = on_path[on_path.index(name):] + [name]
            pytest.fail("import cycle: " + " -> ".join(cycle))
        if name in done:
            return
        on_path.append(name)
        for target in sorted(GRAPH[name]):
            visit(target)
        on_path.pop()
        done.add(name)

    for name in sorted(GRAPH):
        visit(name)


def test_a_cycle_would_be_found():
    """The cycle check itself can fail: a graph with a loop is reported."""
    global GRAPH
    saved = GRAPH
    GRAPH = {**saved, "agentrl_lite.env": saved["agentrl_lite.env"] | {"agentrl_lite.grpo"}}
    try:
        with pytest.raises(pytest.fail.Exception, match="import cycle"):
            test_the_package_has_no_import_cycle()
    finally:
        GRAPH = saved


def layer(name: str) -> str:
    """The package root counts as core: importing any module runs it first."""
    if name.startswith("agentrl_lite.course") or name == "agentrl_lite.__main__":
        return "course"
    if name.startswith("agentrl_lite.tasks"):
        return "tasks"
    return "core"


def wrong_imports(name: str, graph: dict[str, set[str]]) -> list[str]:
    allowed = {"core": {"core"}, "tasks": {"core", "tasks"}, "course": {"core", "tasks", "course"}}[layer(name)]
    return sorted(t for t in graph[name] if layer(t) not in allowed)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_rl_core_does_not_depend_on_tasks_or_course_and_tasks_not_on_course(name):
    wrong = wrong_imports(name, GRAPH)
    assert not wrong, f"{name} ({layer(name)}) imports {wrong}"


def test_an_arrow_back_up_would_be_found():
    """The layer check can fail: the package root importing course code (as it once did) is reported."""
    graph = {**GRAPH, "agentrl_lite": GRAPH["agentrl_lite"] | {"agentrl_lite.course.results"}}
    assert wrong_imports("agentrl_lite", graph) == ["agentrl_lite.course.results"]


CORE_ENTRY_POINTS = ("agentrl_lite.loss", "agentrl_lite.models", "agentrl_lite.grpo", "agentrl_lite.tasks.search")
LESSON_COURSE_IMPORTS = ("agentrl_lite.course", "agentrl_lite.course.exercises", "agentrl_lite.course.presets",
                         "agentrl_lite.course.reproduce", "agentrl_lite.course.results")
RUNNER_PACKAGES = ("nbformat", "papermill", "jsonschema")


@pytest.mark.slow
def test_importing_a_core_module_runs_no_course_code():
    """A fresh interpreter imports the RL core and a task family one module at a time, the lightest first, and
    looks after each import: none may load agentrl_lite.course (one interpreter, not four: each start imports
    torch and transformers again). Then the course modules a lesson imports for its checks and tables: they
    may not load the notebook runner's packages (nbformat builds its schema validator's grammar, 1.3 s, in
    every lesson's kernel)."""
    import subprocess
    import sys

    code = ("import importlib, sys\n"
            f"for core in {CORE_ENTRY_POINTS!r}:\n"
            "    importlib.import_module(core)\n"
            "    loaded = sorted(m for m in sys.modules if m.startswith('agentrl_lite.course'))\n"
            "    print(core, ','.join(loaded))\n"
            f"for module in {LESSON_COURSE_IMPORTS!r}:\n"
            "    importlib.import_module(module)\n"
            f"print('runner', ','.join(m for m in {RUNNER_PACKAGES!r} if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = [line.partition(" ") for line in out.stdout.splitlines()]
    assert [core for core, _, _ in lines] == [*CORE_ENTRY_POINTS, "runner"], out.stdout
    wrong = {core: loaded for core, _, loaded in lines[:-1] if loaded}
    assert not wrong, f"importing these loaded course modules: {wrong}"
    assert not lines[-1][2], f"a lesson's course imports loaded the notebook runner's packages: {lines[-1][2]}"


def test_the_memory_tasks_data_imports_without_the_model_code():
    """The memory task's dialogues, bank, rewards and tools import without `evaluate` (transformers' modelling
    code, seconds per kernel): only its replayers run a model, and they load on first use."""
    import subprocess
    import sys

    code = ("import sys\nimport agentrl_lite.tasks.memory as memory\n"
            "print(sorted(m for m in ('agentrl_lite.evaluate', 'agentrl_lite.rollout', 'transformers.modeling_utils')"
            " if m in sys.modules))\n"
            "memory.replay_policy\nprint('agentrl_lite.evaluate' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.splitlines() == ["[]", "True"], out.stdout


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_opens_with_a_docstring(name):
    docstring = ast.get_docstring(ast.parse(MODULES[name].read_text()))
    assert docstring and len(docstring) > 40, f"{name} has no opening docstring saying what it is"


def test_nothing_probes_an_environment_for_methods():
    probes = [f"{p.relative_to(PACKAGE.parent)}:{i}" for p in MODULES.values()
              for i, line in enumerate(p.read_text().splitlines(), 1)
              if re.search(r"(getattr|hasattr)\(\s*(self\.)?env\b", line)]
    assert not probes, probes


def _search_env():
    from agentrl_lite.tasks import DATA_DIR, read_jsonl
    from agentrl_lite.tasks.search import SearchEnv
    from agentrl_lite.tools import SearchIndex

    return SearchEnv(SearchIndex(read_jsonl(DATA_DIR / "search_corpus.jsonl")))


def _kernel_env():
    from agentrl_lite.tasks.kernels.env import KernelEnv

    return KernelEnv()


@pytest.mark.parametrize("make", [ArithmeticEnv, lambda: ArithmeticEnv(tools=[]), FunctionCallEnv, _search_env,
                                  _kernel_env],
                         ids=["arithmetic", "arithmetic-no-tools", "function-calls", "search", "kernels"])
def test_every_environment_implements_the_protocol(make):
    assert isinstance(make(), Environment)
