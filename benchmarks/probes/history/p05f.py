# lesson 05 probe (p05e.py + a token budget key 'tokens' for sampling and evaluation, and per-task results): SFT (cached), then GRPO variants; synthetic held-out greedy at checkpoints
import copy, sys, time, json, os
import torch
from agentrl_lite import seed_everything
from agentrl_lite.data import DATA_DIR, read_jsonl
from agentrl_lite.eval import bfcl
from agentrl_lite.grpo import GRPOConfig, GRPOTrainer
from agentrl_lite.models import load_policy
from agentrl_lite.rewards import exact_match_tool_reward, tool_call_reward, tool_format_reward
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
V = json.loads(sys.argv[1]); OUT = sys.argv[2]
seed_everything(0)
model, tok = load_policy(None)
env = bfcl.BFCLEnv()
syn = read_jsonl(DATA_DIR / "toolcall_heldout.jsonl")[:V.get("n_eval", 60)]
train = read_jsonl(DATA_DIR / "toolcall_train.jsonl")
if V.get("train_cats"): train = [t for t in train if t["category"] in V["train_cats"]]
demos = read_jsonl(V.get("demos", DATA_DIR / "toolcall_sft.jsonl"))
TOKENS = V.get("tokens", 96)
EVAL = RolloutConfig(max_turns=1, max_new_tokens=TOKENS, temperature=0.0, batch_size=30, progress=False)
def ev():
    t=time.time(); r = bfcl.evaluate_bfcl(model, tok, syn, EVAL, env)
    return {"overall": round(r.overall, 3), **{k: round(v, 3) for k, v in r.accuracy.items()}, "s": round(time.time()-t),
            "correct": sum(row["valid"] for row in r.rows), "valid_ids": [row["id"] for row in r.rows if row["valid"]]}
sft_steps = V.get("sft_steps", 8)
cache = f"/tmp/probe/sft{sft_steps}{V.get('tag', '')}.pt"
rec = {"variant": V}
if os.path.exists(cache):
    model.load_state_dict(torch.load(cache)); rec["sft_eval"] = json.load(open(cache + ".json"))
else:
    conv = [env.prompt(d)[:1] + d["demonstration"] for d in demos]
    tools = [[bfcl.tool_schema(f) for f in d["functions"]] for d in demos]
    t = time.time(); sft(model, tok, conv, tools, SFTConfig(steps=sft_steps, batch_size=8, lr=1e-4, bf16=True, seed=0))
    print("sft s", time.time()-t, flush=True)
    torch.save(model.state_dict(), cache); rec["sft_eval"] = ev(); json.dump(rec["sft_eval"], open(cache + ".json", "w"))
print("SFT", rec["sft_eval"], flush=True)
if V.get("lora"):
    from peft import LoraConfig, get_peft_model
    model = get_peft_model(model, LoraConfig(task_type="CAUSAL_LM", **V["lora"]))
    model.print_trainable_parameters()
state = copy.deepcopy(model.state_dict())
for name, weights in V.get("runs", {"fine": [1.0, 0.0, 1.0]}).items():
    model.load_state_dict(state); seed_everything(V.get("seed", 0))
    cfg = GRPOConfig(steps=V["steps"], prompts_per_step=V.get("prompts", 4), group_size=V.get("group", 8), lr=V.get("lr", 1e-5),
                     loss_type="dapo", bf16_loss=True, micro_batch_size=8, seed=V.get("seed", 0), beta=V.get("beta", 0.0),
                     skip_empty_updates=V.get("skip", True), scale_rewards=V.get("scale", "group"),
                     rollout=RolloutConfig(max_turns=1, max_new_tokens=TOKENS, temperature=V.get("temp", 1.0), batch_size=32, progress=False))
    tr = GRPOTrainer(model, tok, env, train, [tool_format_reward, exact_match_tool_reward, tool_call_reward], cfg, weights)
    _step = tr.step
    def step_and_dump(_step=_step, tr=tr, name=name):
        row = _step()
        eps = tr.last_episodes; rw, _ = tr.score(eps)
        with open(OUT + ".episodes.jsonl", "a") as f:
            for ep, r in zip(eps, rw.tolist()):
                f.write(json.dumps({"run": name, "step": row["step"], "id": ep.metadata.get("id"), "category": ep.metadata.get("category"),
                                    "reward": r, "gold": ep.metadata.get("gold_calls"), "text": ep.completion_text}, default=str) + "\n")
        return row
    tr.step = step_and_dump
    evals = {}
    for k in V.get("eval_at", [V["steps"]]):
        t0 = time.time(); h = tr.train(k)
        evals[k] = ev(); print(name, "step", k, evals[k], f"train {time.time()-t0:.0f}s", flush=True)
    for row in tr.history: print({kk: round(row.get(kk, float("nan")), 3) for kk in ("step", "reward", "frac_reward_zero_std", "rewards/exact_match_tool_reward/mean", "rewards/tool_call_reward/mean", "rewards/tool_format_reward/mean", "entropy", "grad_norm", "kl", "step_time", "completions/clipped_ratio")}, flush=True)
    rec[name] = {"evals": evals, "history": tr.history}
    json.dump(rec, open(OUT, "w"), indent=1, default=str)
