"""Question answering over a SQLite database (task family): an agent answers questions about a generated shop
by querying it with a read-only `sql` tool, as in text-to-SQL agents (Spider, BIRD) trained with RL.

- `database`: the schema and the seeded generator of its rows, `build_database`;
- `tool`: `SqlDatabase` and its `sql` tool, a security boundary for queries a model writes;
- `answers`: gold answers read off query rows, and execution match (`same_answer`);
- `questions`: the question templates of four kinds (lookup, join, aggregate, no_record) and `sql_splits`;
- `env`: `SqlEnv`, the TRL-style `execution_match_reward` and the cold start's `demonstration`.

The database is rebuilt from its seed where it is needed (milliseconds); the questions are committed as
`data/sql_{train,validation,heldout}.jsonl` and the demonstrations as `data/sql_sft.jsonl` (`course.data`).
"""

from agentrl_lite.tasks.sql.answers import (
    NO_RECORD,
    answer_text,
    format_number,
    normalize_sql_answer,
    same_answer,
)
from agentrl_lite.tasks.sql.database import SCHEMA, build_database, schema_text, shop_rows
from agentrl_lite.tasks.sql.env import (
    COLD_START_STEPS,
    SYSTEM_PROMPT,
    SqlEnv,
    demonstration,
    execution_match_reward,
)
from agentrl_lite.tasks.sql.questions import KINDS, SPLITS, TEMPLATES, sql_splits
from agentrl_lite.tasks.sql.tool import SqlDatabase

__all__ = [
    "COLD_START_STEPS",
    "KINDS",
    "NO_RECORD",
    "SCHEMA",
    "SPLITS",
    "SYSTEM_PROMPT",
    "TEMPLATES",
    "SqlDatabase",
    "SqlEnv",
    "answer_text",
    "build_database",
    "demonstration",
    "execution_match_reward",
    "format_number",
    "normalize_sql_answer",
    "same_answer",
    "schema_text",
    "shop_rows",
    "sql_splits",
]
