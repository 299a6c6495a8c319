# how far are bf16-autocast training logprobs from the fp32 sampling logprobs (ratio at the first update)?
import torch, json
from agentrl_lite import seed_everything
from agentrl_lite.data import DATA_DIR, read_jsonl
from agentrl_lite.eval import bfcl
from agentrl_lite.models import load_policy
from agentrl_lite.scoring import token_logprobs
from agentrl_lite.rollout import RolloutConfig, rollout
seed_everything(0)
model, tok = load_policy(None); model.load_state_dict(torch.load("/tmp/probe/sft8all.pt"))
env = bfcl.BFCLEnv()
tasks = [t for t in read_jsonl(DATA_DIR / "toolcall_train.jsonl")][:8]
metas = [t for t in tasks for _ in range(4)]
eps = rollout(model, tok, [env.prompt(t) for t in metas], [env.toolbox_for(t) for t in metas],
              RolloutConfig(max_turns=1, max_new_tokens=96, temperature=1.0, batch_size=32, progress=False), metas)
w = max(len(e.token_ids) for e in eps); pad = tok.pad_token_id
ids = torch.tensor([e.token_ids + [pad]*(w-len(e.token_ids)) for e in eps])
att = torch.tensor([[1]*len(e.token_ids) + [0]*(w-len(e.token_ids)) for e in eps])
mask = torch.tensor([e.model_mask + [0]*(w-len(e.token_ids)) for e in eps])
old = torch.tensor([e.logprobs + [0.0]*(w-len(e.token_ids)) for e in eps])
model.train()
out = {}
for name, on in (("fp32", False), ("bf16", True)):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=on):
        lp = token_logprobs(model, ids, att, mask, 1.0)
    d = (lp.float() - old)[mask.bool()]
    r = d.exp()
    out[name] = {"mean_abs_logprob_diff": d.abs().mean().item(), "max_abs": d.abs().max().item(),
                 "frac_ratio_outside_0.8_1.2": ((r < 0.8) | (r > 1.2)).float().mean().item(), "tokens": int(mask.sum())}
print(json.dumps(out, indent=1))
