"""The data files (course tooling): every file under `data/` is produced here, deterministically from the
task families' generators (`agentrl_lite.tasks`) and fixed seeds.

`agentrl-lite data` (or `make data`) rewrites data/; a test regenerates into a temporary folder and checks
the bytes are identical, so the committed files can always be traced to this code.
"""

from __future__ import annotations

import random
from pathlib import Path

from agentrl_lite.paths import data_dir as default_data_dir
from agentrl_lite.tasks import write_jsonl
from agentrl_lite.tasks.arithmetic import (
    arithmetic_splits,
    calculator_demonstration,
    identity_arithmetic_tasks,
    identity_arithmetic_validation,
    small_arithmetic_tasks,
)
from agentrl_lite.tasks.function_calls import function_calling_splits, function_calling_validation
from agentrl_lite.tasks.memory import heldout_dialogues, memory_dialogues
from agentrl_lite.tasks.search import SPLITS, demonstration, encyclopedia, heldout_world, search_questions
from agentrl_lite.tasks.sql import KINDS as SQL_KINDS
from agentrl_lite.tasks.sql import SqlDatabase, sql_splits
from agentrl_lite.tasks.sql import demonstration as sql_demonstration
from agentrl_lite.tasks.word_problems import word_problem_splits, word_problem_validation
from agentrl_lite.tools import SearchIndex

SEARCH_SFT_PER_KIND = {"single_hop": 64, "two_hop": 96, "comparison": 64, "unanswerable": 32}
"""search demonstrations per question kind: the multi-search kinds get more than their share of questions"""
SQL_SFT_PER_KIND = 16
"""SQL demonstrations per question kind (`tasks.sql.KINDS`), drawn from the training questions"""


def build_all(data_dir: Path | str | None = None) -> list[Path]:
    """Regenerate every data file (default: the checkout's data/). Seeds are fixed here, so the output is
    byte-identical every time."""
    data_dir = Path(data_dir or default_data_dir())
    chains = arithmetic_splits()
    demos = [{"id": t["id"], "messages": calculator_demonstration(t)} for t in chains["train"][:64]]
    small_train, small_validation, small_heldout = small_arithmetic_tasks()
    identity_train, identity_heldout = identity_arithmetic_tasks()
    calls_train, calls_heldout, calls_sft = function_calling_splits()
    words_train, words_heldout, words_sft = word_problem_splits()
    dialogues = memory_dialogues(seed=0)
    world = encyclopedia(seed=0, state_missing_year=True)  # a gap the documents state (docs/design/09_agentic_search.md)
    questions = search_questions(world, seed=0)  # its held-out split is retired (`tasks.search.heldout_world`)
    test_world, search_heldout = heldout_world()
    search_train = [q for q in questions if q["split"] == "train"]
    index = SearchIndex(world.documents)
    demo_rng = random.Random(3)  # demonstrations of every kind: a kind the cold start never shows, RL cannot find
    search_sft = [{**q, "messages": demonstration(q, index)} for kind, n in SEARCH_SFT_PER_KIND.items()
                  for q in demo_rng.sample([q for q in search_train if q["kind"] == kind], n)]
    demo_rng.shuffle(search_sft)
    sql = sql_splits(seed=0)
    shop = SqlDatabase(seed=0)  # the database the questions were generated from: the tool's replies are its own
    sql_rng = random.Random(4)
    sql_sft = [{**q, "messages": sql_demonstration(q, shop)} for kind in SQL_KINDS
               for q in sql_rng.sample([q for q in sql["train"] if q["kind"] == kind], SQL_SFT_PER_KIND)]
    sql_rng.shuffle(sql_sft)
    files = {
        "arithmetic_train.jsonl": chains["train"],
        "arithmetic_heldout.jsonl": chains["heldout"],
        "arithmetic_validation.jsonl": chains["validation"],
        "arithmetic_sft.jsonl": demos,
        "small_arithmetic_train.jsonl": small_train,
        "small_arithmetic_validation.jsonl": small_validation,
        "small_arithmetic_heldout.jsonl": small_heldout,
        "identity_arithmetic_train.jsonl": identity_train,
        "identity_arithmetic_heldout.jsonl": identity_heldout,
        "identity_arithmetic_validation.jsonl": identity_arithmetic_validation(),
        "toolcall_train.jsonl": calls_train,
        "toolcall_heldout.jsonl": calls_heldout,
        "toolcall_sft.jsonl": calls_sft,
        "toolcall_validation.jsonl": function_calling_validation(),
        "word_problems_train.jsonl": words_train,
        "word_problems_heldout.jsonl": words_heldout,
        "word_problems_sft.jsonl": words_sft,
        "word_problems_validation.jsonl": word_problem_validation(),
        "search_corpus.jsonl": world.documents,
        **{f"search_{split}.jsonl": [q for q in questions if q["split"] == split] for split in SPLITS[:2]},
        "search_heldout.jsonl": search_heldout,
        "search_heldout_corpus.jsonl": test_world.documents,
        "search_sft.jsonl": search_sft,
        **{f"memory_{split}.jsonl": [d for d in dialogues if d["split"] == split] for split in SPLITS[:2]},
        "memory_heldout.jsonl": heldout_dialogues(),  # the first data set's held-out split is retired
        **{f"sql_{split}.jsonl": rows for split, rows in sql.items()},
        "sql_sft.jsonl": sql_sft,
    }
    for name, rows in files.items():
        write_jsonl(data_dir / name, rows)
    return [data_dir / name for name in files]
