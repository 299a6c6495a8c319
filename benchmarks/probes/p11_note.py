"""Lesson 11 probe: does a note before the call make the manager's operation a reading instead of a prior?

Item 9 of results/notes/11_memory_agents.md: the manager's cold start (the lesson's balanced demonstrations,
16 steps of 8) learns a prior over operations that its seed sets: seed 2 never chose UPDATE, seed 1 chose it
almost everywhere. With `MemoryManagerEnv(note=True)` each demonstration first writes one line, "Fact: <whose
what>. Memory: <[id] or none>." (`memory.manager_note`), then the call: the choice between ADD and UPDATE
becomes copying a name from the message and finding it among the related memories the prompt lists.

Cold start as the notebook builds it, then a teacher-forced evaluation on every validation turn (the bank the
ideal operations built, greedy reply): the chosen operation against the ideal one, per event, and whether the
note the model wrote is the ideal note. One run per invocation, appended to results/11_probe_note.json:

    python benchmarks/probes/p11_note.py --seed 1 --note
    python benchmarks/probes/p11_note.py --seed 1            # the notebook's cold start, for the A/B
"""

from __future__ import annotations

import argparse
import datetime
import resource
import time
from collections import Counter, defaultdict

from agentrl_lite import seed_everything, write_results
from agentrl_lite.course.results import current_command, read_results
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import load_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.memory import MemoryManagerEnv, cold_start_conversations, manager_note, manager_tasks

MIN_SHARE = 0.2  # the notebook's: every operation at least a fifth of the demonstrations


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--note", action="store_true", help="demonstrations and prompt with the note line")
    p.add_argument("--sft-steps", type=int, default=16, help="the cpu profile's")
    p.add_argument("--max-new-tokens", type=int, default=80, help="64 in the notebook; the note needs about 16 more")
    args = p.parse_args()
    seed_everything(args.seed)
    train_tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_train.jsonl"))
    val_tasks = manager_tasks(read_jsonl(DATA_DIR / "memory_validation.jsonl"))
    env = MemoryManagerEnv(note=args.note)
    conversations, _ = cold_start_conversations(env, train_tasks, seed=args.seed, min_share=MIN_SHARE)
    model, tokenizer = load_policy(None)
    start = time.perf_counter()
    losses = sft(model, tokenizer, conversations, env.toolbox_for(train_tasks[0]).schemas,
                 SFTConfig(steps=args.sft_steps, batch_size=8, lr=1e-4, bf16="auto", seed=args.seed,
                           micro_batch_tokens=2048))
    sft_seconds = time.perf_counter() - start
    start = time.perf_counter()
    report = evaluate(model, tokenizer, env, val_tasks,
                      RolloutConfig(max_turns=1, max_new_tokens=args.max_new_tokens, temperature=0.0, batch_size=64,
                                    progress=False), label_key="event", dtype="auto")
    chosen: dict[str, Counter] = defaultdict(Counter)
    notes = Counter()
    for task, s, ep in zip(val_tasks, report.scores, report.episodes, strict=True):
        chosen[task["ideal"]["op"]][s["op"]] += 1
        if args.note:
            written = ep.model_turns[0].content.split("\n", 1)[0].strip()
            notes[task["event"], written == manager_note(task)] += 1
    row = {"command": current_command(), "seed": args.seed, "note": args.note,
           "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
           "sft_steps": args.sft_steps, "sft_seconds": round(sft_seconds, 1),
           "eval_seconds": round(time.perf_counter() - start, 1), "losses": [round(x, 4) for x in losses],
           "demonstrations": len(conversations), "turns": len(val_tasks), "correct": report.accuracy,
           "by_event": report.by_label(), "chosen_by_ideal": {k: dict(v) for k, v in chosen.items()},
           "note_right_by_event": {f"{e}, {'right' if ok else 'wrong'}": n for (e, ok), n in sorted(notes.items())},
           "examples": [ep.model_turns[0].content for ep in report.episodes[:12]],
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
    print(row, flush=True)
    old = read_results("11_probe_note")
    write_results("11_probe_note", {"split": "validation", "runs": (old["metrics"]["runs"] if old else []) + [row]},
                  profile="cpu", model="SmolLM2-135M-Instruct (embedded)", seed=args.seed)


if __name__ == "__main__":
    main()
