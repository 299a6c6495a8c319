"""Two processes on CPU (torchrun, gloo) train through the TRL bridge: data parallelism without a GPU.

Each rank must see other prompts, the two must end with identical weights that differ from the start, and the
global batch must be ours (per-device rows × accumulation × 2 = prompts_per_step × group_size). Our own trainer
is single-process: it has no data parallelism to test (issue 67 says so in its note)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

RANK_SCRIPT = Path(__file__).parent / "fixtures" / "trl_rank.py"


FAMILIES = ("arithmetic", "function_calls")


@pytest.mark.slow
def test_two_ranks_train_on_different_prompts_to_identical_weights(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parent.parent),
           "TRL_EXPERIMENTAL_SILENCE": "1"}
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          str(29500 + os.getpid() % 1000), str(RANK_SCRIPT), ",".join(FAMILIES), str(tmp_path)],
                         env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    for family in FAMILIES:
        ranks = [json.loads((tmp_path / family / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert all(r["world_size"] == 2 for r in ranks)
        assert all(r["per_device_batch"] * r["accumulation"] * 2 == 4 * 2 for r in ranks), "not our global batch"
        assert ranks[0]["after"] == ranks[1]["after"], f"{family}: the ranks' weights diverged"
        assert ranks[0]["after"] != ranks[0]["before"], f"{family}: training changed nothing"
        assert ranks[0]["before"] == ranks[1]["before"]
        first, second = set(ranks[0]["prompts"]), set(ranks[1]["prompts"])
        assert first and second and first != second, f"{family}: both ranks scored the same prompts"
