"""Task families: each file is one family's generator, environment (see `agentrl_lite.env`) and
task-specific rewards, apart from the RL core.

- `arithmetic`: arithmetic questions with or without a calculator (`ArithmeticEnv`, lessons 00–04 and 07);
- `word_problems`: multi-step word problems with a calculator (lessons 06–08; scored by `ArithmeticEnv`);
- `function_calls`: synthetic function-calling tasks and BFCL entries (`FunctionCallEnv`, lesson 05);
- `bfcl`: BFCL v4's data and AST checker, offline.

Tasks are JSON objects; the committed files under `data/` are read with `read_jsonl` from `DATA_DIR` and regenerated
by `agentrl_lite.course.data.build_all`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agentrl_lite.paths import data_dir


def __getattr__(name: str) -> Any:
    """`DATA_DIR`, where the generated task files live (`paths.data_dir`), found when first asked for: importing a
    task family never fails because the course checkout is elsewhere."""
    if name == "DATA_DIR":
        return data_dir()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def write_jsonl(path: Path, rows: Iterable[dict[str, Any]]) -> None:
    """One JSON object per line, keys sorted, so regenerated files are byte-identical."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n")


def read_jsonl(path: Path | str) -> list[dict[str, Any]]:
    """The JSON objects of a `.jsonl` file, one per non-blank line."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
