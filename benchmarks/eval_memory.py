"""How much memory a multi-turn evaluation holds, by batch size: the measurement behind lesson 09's peak.

Lesson 09 evaluates its agent greedily on 100 held-out questions, three turns each, with the search results in
the context: the longest contexts of the course's evaluations. This cold-starts the policy as the lesson's cpu
profile does (12 SFT steps of 8 demonstrations, seed 0), then evaluates the same 100 questions once per batch size
with the lesson's settings (3 turns of 40 tokens, greedy, the fp32 policy itself as the lesson evaluates it), and
records for each:

- the peak resident memory of this process during the evaluation (sampled every 20 ms) and the memory it held
  before the evaluation started, so the difference is what the evaluation added (mostly the KV cache);
- the seconds, and the exact match and searches per question, to show whether the batch size changed the answers.

Usage:

    python benchmarks/eval_memory.py [--batches 64 32 16]     # writes results/bench/bench_eval_memory.json
"""

from __future__ import annotations

import argparse
import shlex
import sys
import threading
import time

import psutil

from agentrl_lite.course import seed_everything, write_results
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import load_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks.search import KINDS, SearchEnv
from agentrl_lite.tools import SearchIndex


class PeakMemory:
    """The most resident memory this process held since the last `reset`, sampled every 20 ms by a thread."""

    def __init__(self) -> None:
        self.process = psutil.Process()
        self.peak_mb = self.now_mb()
        threading.Thread(target=self._sample, daemon=True).start()

    def now_mb(self) -> float:
        return self.process.memory_info().rss / 2**20

    def _sample(self) -> None:
        while True:
            self.peak_mb = max(self.peak_mb, self.now_mb())
            time.sleep(0.02)

    def reset(self) -> float:
        self.peak_mb = self.now_mb()
        return self.peak_mb


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 32, 16], help="evaluation batch sizes")
    args = parser.parse_args()
    memory = PeakMemory()
    seed_everything(0)
    corpus, heldout_corpus = (read_jsonl(DATA_DIR / f"search_{name}.jsonl") for name in ("corpus", "heldout_corpus"))
    every = read_jsonl(DATA_DIR / "search_heldout.jsonl")
    heldout = [q for kind in KINDS for q in [q for q in every if q["kind"] == kind][:25]]  # the cpu profile's 100
    env, heldout_env = SearchEnv(SearchIndex(corpus)), SearchEnv(SearchIndex(heldout_corpus), mode="agent")
    model, tokenizer = load_policy(None)
    demos = read_jsonl(DATA_DIR / "search_sft.jsonl")
    start = time.perf_counter()
    sft(model, tokenizer, [env.prompt(d)[:1] + d["messages"] for d in demos], env.toolbox_for().schemas,
        SFTConfig(steps=12, batch_size=8, lr=1e-4, bf16="auto", seed=0))
    metrics = {"questions": len(heldout), "max_turns": 3, "max_new_tokens": 40, "eval_dtype": str(model.dtype),
               "sft_seconds": time.perf_counter() - start,
               "sft_peak_mb": memory.peak_mb, "batches": {}}
    for batch in args.batches:
        before = memory.reset()
        start = time.perf_counter()
        report = evaluate(model, tokenizer, heldout_env, heldout,
                          RolloutConfig(max_turns=3, max_new_tokens=40, temperature=0.0, batch_size=batch,
                                        progress=False), label_key="kind")
        row = {"seconds": time.perf_counter() - start, "held_before_mb": before, "peak_mb": memory.peak_mb,
               "added_mb": memory.peak_mb - before, "exact_match": report.accuracy,
               "searches_per_question": report.calls_per_episode, "correct": report.correct}
        metrics["batches"][str(batch)] = row
        print(f"batch {batch}: " + ", ".join(f"{k} {v:.3g}" for k, v in row.items() if k != "correct"), flush=True)
    write_results("bench_eval_memory", metrics, profile="cpu", model="SmolLM2-135M-Instruct (embedded)", seed=0,
                  command="python " + " ".join(shlex.quote(x) for x in sys.argv))


if __name__ == "__main__":
    main()
