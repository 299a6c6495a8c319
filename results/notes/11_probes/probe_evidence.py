"""Answer agent: the plain reply (the answer alone) against a reply that cites its evidence first
("Memory: <fact>\nAnswer: <answer>"), same cold start budget; validation dialogues only.
usage: python probe_evidence.py plain|evidence STEPS LR BATCH [K]"""
import random
import sys
import time

from agentrl_lite import seed_everything
from agentrl_lite.evaluate import evaluate
from agentrl_lite.models import load_policy
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
from agentrl_lite.tasks import memory as M

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:6.0f}s]", *a, flush=True)


FORMAT, STEPS, LR, BATCH = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
K = int(sys.argv[5]) if len(sys.argv) > 5 else 3
seed_everything(0)
train = read_jsonl(DATA_DIR / "memory_train.jsonl")
val = read_jsonl(DATA_DIR / "memory_validation.jsonl")
env = M.AnswerEnv()
if FORMAT == "plain":  # the reply before this probe: the answer alone
    M.ANSWER_PROMPT = ("Answer the question from the memories below; a later memory is newer than an earlier one. "
                       "Reply with the answer alone (a name, a word or a city), or unknown when the memories do "
                       "not give it.")
    env.demonstration = lambda t: [{"role": "assistant", "content": t["answer"]}]
answerer, tok = load_policy(None)
demos = [t for t in M.answer_demonstrations(train, K) if t["source"] != "full context"]
random.Random(0).shuffle(demos)
start = time.time()
losses = sft(answerer, tok, [env.prompt(t) + env.demonstration(t) for t in demos], None,
             SFTConfig(steps=STEPS, batch_size=BATCH, lr=LR, bf16=True, seed=0, progress=False))
log(FORMAT, "sft", STEPS, BATCH, LR, "loss", round(losses[0], 3), round(sum(losses[-5:]) / 5, 3),
    "seconds", round(time.time() - start))
cfg = RolloutConfig(max_turns=1, max_new_tokens=12 if FORMAT == "plain" else 64, temperature=0.0, batch_size=64,
                    progress=False)
for name, manage in (("oracle", M.oracle), ("append-only", M.append_only), ("last-write-wins", M.last_write_wins)):
    tasks = [x for d in val for x in M.answer_tasks(d, manage(d)[0], name, K)]
    start = time.time()
    r = evaluate(answerer, tok, env, tasks, cfg, label_key="kind", dtype="auto")
    log(FORMAT, name, "EM", round(r.accuracy, 3), {k: round(v, 3) for k, v in r.by_label().items()},
        "seconds", round(time.time() - start))
    if name == "oracle":
        for ep, t in [(e, t) for e, t in zip(r.episodes, tasks) if not e.metadata["score"]["correct"]][:12]:
            print("  WRONG", repr(ep.model_turns[-1].content), "| gold", t["answer"], "|", t["question"])
