"""The SQL environment (an `Environment`): a question about the shop database in, `sql` calls and an
`<answer>` out, scored by execution match (`answers.same_answer`) against the gold answer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from agentrl_lite.chat import ToolCall, extract_answer, format_tool_call
from agentrl_lite.episode import Episode
from agentrl_lite.rewards import _column, completion_text
from agentrl_lite.tasks.sql.answers import NO_RECORD, same_answer
from agentrl_lite.tasks.sql.database import schema_text
from agentrl_lite.tasks.sql.tool import SqlDatabase
from agentrl_lite.tools import Toolbox

SYSTEM_PROMPT = (
    "You answer questions about a shop's SQLite database. Use the sql tool to run one read-only SELECT query at "
    f"a time, and read its result before you answer. The tables:\n{schema_text()}\n"
    "When you know the answer, reply with <answer>...</answer> holding only the answer: a value, or several "
    "values separated by commas. Write numbers without units or thousands separators, rounded to 2 decimal "
    f"places. If no record matches the question, reply <answer>{NO_RECORD}</answer>."
)
"""the agent's instructions: the tool, the schema (`database.schema_text`) and the answer format"""


@dataclass
class SqlEnv:
    """Questions over the shop database, answered with the read-only `sql` tool (an `Environment`)."""

    database: SqlDatabase = field(default_factory=SqlDatabase)
    """the database the questions were generated from (the course's: `SqlDatabase(seed=0)`, the default)"""

    def prompt(self, task: dict[str, Any]) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": task["question"]}]

    def toolbox_for(self, task: dict[str, Any] | None = None) -> Toolbox:
        """A toolbox with the `sql` tool on this database (the same for every task, so `task` may be left out)."""
        return Toolbox([self.database.sql])

    def score(self, task: dict[str, Any], episode: Episode) -> dict[str, float]:
        """correct: the `<answer>` holds the gold answer's values (`same_answer`); formatted: an `<answer>` was
        given; sql_calls: well-formed calls run; sql_errors: tool replies that were errors (a failed query or a
        malformed call); errored: 1.0 when there was at least one; malformed_calls: `<tool_call>` blocks that did
        not parse (their reply is the parse error); repaired: 1.0 when a reply after an error was not an error (the
        policy fixed its query, or its call, in a later turn)."""
        per_turn = _replies(episode)
        replies = [ok for results in per_turn for ok in (not r.startswith("Error:") for r in results)]
        errors = replies.count(False)
        first_error = replies.index(False) if errors else len(replies)
        malformed = sum(max(0, len(results) - len(turn.tool_calls))
                        for turn, results in zip(episode.model_turns, per_turn, strict=True))
        return {
            "correct": float(same_answer(episode.answer, task["answer"])),
            "formatted": float(episode.answer is not None),
            "sql_calls": float(episode.num_tool_calls),
            "sql_errors": float(errors),
            "errored": float(errors > 0),
            "malformed_calls": float(malformed),
            "repaired": float(any(replies[first_error + 1:])),
        }


def _replies(episode: Episode) -> list[list[str]]:
    """The tool's replies to each model turn, in order (empty for a turn without a `<tool_call>`): the tool turn
    that follows it, or, for the last allowed turn, which no tool turn follows, the results the turn records."""
    out: list[list[str]] = []
    turns = episode.turns
    for i, turn in enumerate(turns):
        if turn.role != "model":
            continue
        following = turns[i + 1] if i + 1 < len(turns) else None
        out.append(list(following.tool_results) if following is not None and following.role == "tool"
                   else list(turn.tool_results))
    return out


def execution_match_reward(prompts: list[Any], completions: list[Any], answer: list[str] | None = None,
                           **kwargs: Any) -> list[float | None]:
    """1.0 when the last `<answer>` of the policy's text holds the gold `answer`'s values (`same_answer`), else
    0.0 (TRL's reward signature; needs the task column `answer`)."""
    gold = _column("answer", answer, len(completions), "execution_match_reward")
    return [float(same_answer(extract_answer(completion_text(c)), g)) for c, g in zip(completions, gold, strict=True)]


COLD_START_STEPS = 16
"""SFT steps of lesson 12's cold start (batch 8, rate 1e-4), chosen on validation questions by the headroom rule
registered before its run (docs/design/12_sql_agent.md): every checkpoint of 8, 16 and 24 steps makes a sql call
in every seed, and 16 leaves the most questions that greedy decoding gets wrong and one of 8 samples gets right
(`course.cold_start_study --task sql`, results/lessons/12_cold_start_study.json)"""


def demonstration(task: dict[str, Any], database: SqlDatabase) -> list[dict[str, str]]:
    """A correct conversation for one task (without the system prompt): one `sql` call with the gold SQL, the
    tool's real reply, then the gold answer."""
    return [
        {"role": "user", "content": task["question"]},
        {"role": "assistant", "content": format_tool_call(ToolCall("sql", {"query": task["gold_sql"]}))},
        {"role": "tool", "content": database.sql(task["gold_sql"])},
        {"role": "assistant", "content": f"<answer>{task['answer']}</answer>"},
    ]
