"""Full fine-tuning against LoRA at ranks 1, 8 and 32 under GRPO, on lesson 04's task (course tooling).

"LoRA Without Regret" (Schulman et al., Thinking Machines Lab, 2025) reports that LoRA on every linear layer
matches full fine-tuning when its learning rate is about ten times full fine-tuning's (about fifteen times for
runs under a hundred steps), and that in reinforcement learning even rank 1 does, since an episode carries about
one bit of information. This study asks the same question at the course's scale: lesson 04's small-arithmetic
task, its GRPO settings (the dapo loss, cpu profile: 8 steps of 4 prompts × 8 samples), the embedded SmolLM2-135M,
and the same held-out questions, for every configuration and seed:

- "full": every weight trains, at lesson 04's learning rate;
- "LoRA r=1", "LoRA r=8", "LoRA r=32": adapters on every linear layer, lora_alpha 32 as in the post, the base
  frozen, at `LORA_LR_FACTOR` times that learning rate (the post's rule for short runs; not tuned here).

Each (seed, configuration) runs in a fresh process, so its peak resident memory is its own; the record keeps
the trainable parameters, AdamW's state size, the mean step time and its sampling/update split, and the per-item
held-out outcomes. The summary is `reproduce.summarise` of `reproduce.LORA` (claims, Holm, verdicts):
`python -m agentrl_lite.course.lora_study --seeds 0 1 2` writes `results/lessons/04_lora_seeds.json`; lesson 04's
section 8 shows it.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import resource
import time
from typing import Any

import numpy as np

from agentrl_lite.course.profiles import resolve_profile, seed_everything
from agentrl_lite.course.reproduce import LORA, summarise
from agentrl_lite.course.results import write_results

RANKS = (1, 8, 32)
LORA_ALPHA = 32
LORA_LR_FACTOR = 15
"""LoRA's learning rate over full fine-tuning's: "LoRA Without Regret" finds about 10× optimal, about 15× for runs
under a hundred steps (ours are 8)"""
INSTRUCTIONS = "Answer the math question. End your reply with the result as a number."
"""lesson 04's instruction for the raw model (no tools, no answer tags)"""
BUDGET = {  # lesson 04's GRPO run and held-out evaluation, per profile
    "smoke": dict(steps=1, prompts=1, group=4, max_new_tokens=12, n_eval=4, lr=2e-5),
    "cpu": dict(steps=8, prompts=4, group=8, max_new_tokens=32, n_eval=76, lr=2e-5),
    "gpu": dict(steps=30, prompts=8, group=8, max_new_tokens=48, n_eval=76, lr=1e-5),
}


def configurations() -> dict[str, int | None]:
    """name → LoRA rank (None: full fine-tuning), in the order the study runs them."""
    return {"full": None, **{f"LoRA r={r}": r for r in RANKS}}


def _lora(rank: int | None) -> dict[str, Any] | None:
    return None if rank is None else {"r": rank, "lora_alpha": LORA_ALPHA, "target_modules": "all-linear"}


def run_one(seed: int, rank: int | None | str, profile: str, model_name: str | None = None) -> dict[str, Any]:
    """One GRPO run (or, for rank "start", no training) from the start policy; its held-out evaluation, time and
    memory. model_name: None for the embedded model, "tiny" for the 2-layer random model of the unit tests."""
    import torch

    from agentrl_lite.evaluate import evaluate
    from agentrl_lite.grpo import GRPOConfig, GRPOTrainer
    from agentrl_lite.loss import LossConfig
    from agentrl_lite.models import load_policy, tiny_policy
    from agentrl_lite.rewards import final_number_reward
    from agentrl_lite.rollout import RolloutConfig
    from agentrl_lite.tasks import DATA_DIR, read_jsonl
    from agentrl_lite.tasks.arithmetic import ArithmeticEnv

    budget = BUDGET[profile]
    seed_everything(seed)
    lora = None if rank == "start" else _lora(rank)  # type: ignore[arg-type]
    if model_name == "tiny":
        model, tokenizer = tiny_policy(seed=0)
        if lora is not None:
            from peft import LoraConfig, get_peft_model

            model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **lora))
    else:
        model, tokenizer = load_policy(model_name, lora=lora)
    env = ArithmeticEnv(tools=[], instructions=INSTRUCTIONS)
    train = read_jsonl(DATA_DIR / "small_arithmetic_train.jsonl")
    heldout = read_jsonl(DATA_DIR / "small_arithmetic_heldout.jsonl")[: budget["n_eval"]]
    trainable = [p for p in model.parameters() if p.requires_grad]
    out: dict[str, Any] = {"seed": seed, "rank": rank, "trainable_parameters": sum(p.numel() for p in trainable),
                           # AdamW keeps two fp32 moments per trainable weight
                           "optimizer_state_mb": 2 * 4 * sum(p.numel() for p in trainable) / 2**20}
    if rank != "start":
        lr = budget["lr"] * (1 if lora is None else LORA_LR_FACTOR)
        config = GRPOConfig(steps=budget["steps"], prompts_per_step=budget["prompts"], group_size=budget["group"], lr=lr,
                            micro_batch_size=8, bf16_loss="auto", seed=seed, progress=False,
                            loss=LossConfig(loss_type="dapo"),
                            rollout=RolloutConfig(max_turns=1, max_new_tokens=budget["max_new_tokens"], temperature=1.0,
                                                  batch_size=64, progress=False))
        trainer = GRPOTrainer(model, tokenizer, env, train, [final_number_reward], config)
        start = time.perf_counter()
        history = trainer.train()
        out.update(lr=lr, seconds=time.perf_counter() - start,
                   step_time=float(np.mean([r["step_time"] for r in history])),
                   sampling_time=float(np.mean([r["time/sampling"] for r in history])),
                   update_time=float(np.mean([r["time/update"] for r in history])),
                   reward=[r["reward"] for r in history])
        del trainer
    result = evaluate(model, tokenizer, env, heldout, RolloutConfig(
        max_turns=1, max_new_tokens=budget["max_new_tokens"], temperature=0, batch_size=80, progress=False))
    correct = torch.tensor(final_number_reward([e.prompt for e in result.episodes],
                                               [e.completion_text for e in result.episodes],
                                               answer=[t["answer"] for t in heldout])).tolist()
    ops = [t["expression"].split()[1] for t in heldout]
    out["heldout"] = {"accuracy": float(np.mean(correct)), "correct": correct, "ids": result.ids,
                      "by_label": {op: float(np.mean([c for c, o in zip(correct, ops, strict=True) if o == op]))
                                   for op in sorted(set(ops))},
                      "truncated": float(np.mean([e.stop_reason == "max_tokens" for e in result.episodes]))}
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # this process: one run
    return out


def _isolated(args: tuple) -> dict[str, Any]:
    return run_one(*args)


def lora_study(seeds: list[int], profile: str = "auto", model_name: str | None = None,
               isolate: bool = True) -> dict[str, Any]:
    """Run every configuration for every seed (each in a fresh process when `isolate`, for its own peak memory)
    and return the per-seed records `summarise` takes: `metrics.heldout[stage]` and the measures per stage."""
    from tqdm.auto import tqdm

    profile = resolve_profile(profile)
    jobs = [(0, "start", profile, model_name)]  # the start is greedy and untrained: the same for every seed
    jobs += [(seed, rank, profile, model_name) for seed in seeds for rank in configurations().values()]
    runs = []
    if isolate:
        context = multiprocessing.get_context("spawn")
        with context.Pool(1, maxtasksperchild=1) as pool:
            runs = list(tqdm(pool.imap(_isolated, jobs), total=len(jobs), desc="LoRA study runs"))
    else:
        runs = [run_one(*job) for job in tqdm(jobs, desc="LoRA study runs")]
    start, trained = runs[0], runs[1:]
    names = {rank: name for name, rank in configurations().items()}
    records: dict[int, dict[str, Any]] = {}
    for seed in seeds:
        mine = {names[r["rank"]]: r for r in trained if r["seed"] == seed}
        records[seed] = {"model": model_name or "SmolLM2-135M-Instruct (embedded)", "metrics": {
            "heldout": {"start": start["heldout"], **{name: r["heldout"] for name, r in mine.items()}},
            "runs": {name: {k: v for k, v in r.items() if k != "heldout"} for name, r in mine.items()}}}
    return {"records": records, "start": {k: v for k, v in start.items() if k != "heldout"}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--profile", default="auto", choices=["auto", "smoke", "cpu", "gpu"])
    args = parser.parse_args(argv)
    profile = resolve_profile(args.profile)
    clock = time.perf_counter()
    study = lora_study(args.seeds, profile)
    summary = summarise(LORA, study["records"])
    summary["runs"] = {name: {measure: [study["records"][s]["metrics"]["runs"][name][measure] for s in args.seeds]
                              for measure in ("trainable_parameters", "optimizer_state_mb", "peak_rss_mb", "step_time",
                                              "sampling_time", "update_time", "seconds", "lr", "reward")}
                       for name in configurations()}
    summary["start"] = study["start"]
    summary["settings"] = {"budget": BUDGET[profile], "ranks": list(RANKS), "lora_alpha": LORA_ALPHA,
                           "lora_lr_factor": LORA_LR_FACTOR, "target_modules": "all-linear"}
    summary["notebook_seconds"] = time.perf_counter() - clock
    command = os.environ.get("AGENTRL_COMMAND") or (
        f"python -m agentrl_lite.course.lora_study --profile {profile} --seeds {' '.join(map(str, args.seeds))}")
    path = write_results(f"{LORA.results}_seeds", summary, profile=profile, model="SmolLM2-135M-Instruct (embedded)",
                         seed=args.seeds[0], command=command)
    print("wrote", path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
