"""The careful reader on the heuristic banks of all 40 held-out dialogues (no model)."""
import statistics
from collections import defaultdict

from agentrl_lite.tasks import memory as M

held = [d for d in M.memory_dialogues() if d["split"] == "heldout"]
for name, manage in [("append-only", M.append_only), ("last-write-wins", M.last_write_wins), ("oracle", M.oracle)]:
    passed, size = defaultdict(list), []
    for d in held:
        bank, _ = manage(d)
        size.append(len(bank.entries))
        for q in d["questions"]:
            passed[q["kind"]].append(M.gold_answer_in_bank(bank, q))
    print(name, {k: round(sum(v) / len(v), 3) for k, v in passed.items()}, "size", statistics.mean(size))
