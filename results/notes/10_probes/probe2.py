import time, json, sys
import numpy as np
from agentrl_lite import seed_everything
from agentrl_lite.course.presets import grpo_preset
from agentrl_lite.evaluate import evaluate
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.models import load_policy, stash_weights
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks.kernels.env import KernelEnv, kernel_tasks, demonstration

def ev(model, tok, env, ts, label):
    G = RolloutConfig(max_turns=1, max_new_tokens=240, temperature=0.0, batch_size=32, progress=False)
    t=time.time(); r = evaluate(model, tok, env, ts, G, dtype="auto")
    m = {k: float(np.mean([s[k] for s in r.scores])) for k in ("reward","fast_0","fast_1","compiled")}
    print(label, f"{time.time()-t:.0f}s", m, flush=True)
    print("   ", [(x["name"], round(s["reward"],2)) for x,s in zip(ts, r.scores)], flush=True)
    return r

if __name__ == "__main__":
    sft_steps, rl_steps, lr = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    seed_everything(0)
    model, tok = load_policy(None)
    env = KernelEnv(shape="cpu", timing=True)
    train, val, held = kernel_tasks("train"), kernel_tasks("validation"), kernel_tasks("heldout")
    demos = [env.prompt(x) + [{"role": "assistant", "content": demonstration(x)}] for x in train]
    t=time.time()
    losses = sft(model, tok, demos, None, SFTConfig(steps=sft_steps, batch_size=8, lr=1e-4, bf16=True, seed=0, progress=False))
    print("sft", f"{time.time()-t:.0f}s", losses[0], losses[-1], flush=True)
    rv = ev(model, tok, env, val, "val SFT")
    rh = ev(model, tok, env, held, "held SFT")
    for x, ep, s in zip(held, rh.episodes, rh.scores):
        if s["reward"] < 0: print("=====", x["name"], s["reward"]); print(ep.model_turns[-1].content[:500])
    BUDGET = dict(steps=rl_steps, prompts=4, group=8, lr=lr)
    config = grpo_preset(BUDGET, 0, max_turns=1, max_new_tokens=240)
    trainer = GRPOTrainer(model, tok, env, train, [env.reward], config)
    t=time.time()
    hist = trainer.train()
    print("grpo", f"{time.time()-t:.0f}s")
    for r in hist:
        print({k: round(r[k],3) if isinstance(r.get(k), float) else r.get(k) for k in ("step","reward","reward_std","frac_reward_zero_std","completions/mean_length","completions/clipped_ratio","step_time","grad_norm")}, flush=True)
    ev(model, tok, env, val, "val GRPO")
    ev(model, tok, env, held, "held GRPO")
