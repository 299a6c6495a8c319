import time, collections, json, sys, random
import torch
from agentrl_lite import seed_everything
from agentrl_lite.tasks import memory as M
from agentrl_lite.models import load_policy
from agentrl_lite.evaluate import evaluate
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.grpo import GRPOTrainer
from agentrl_lite.course.presets import grpo_preset
T0=time.time()
def log(*a): print(f"[{time.time()-T0:6.0f}s]",*a, flush=True)
seed_everything(0)
ds=M.memory_dialogues(); train=[d for d in ds if d['split']=='train']; held=[d for d in ds if d['split']=='heldout'][:int(sys.argv[1])]
ANS_STEPS=int(sys.argv[2]); MAN_STEPS=int(sys.argv[3]); GRPO_STEPS=int(sys.argv[4])
aenv=M.AnswerEnv(); menv=M.MemoryManagerEnv()
# answer agent
answerer,tok=load_policy(None)
demos=[t for t in M.answer_demonstrations(train) if t['source']!='full context']; random.Random(0).shuffle(demos)
convs=[aenv.prompt(t)+aenv.demonstration(t) for t in demos]
t=time.time(); l=sft(answerer,tok,convs,None,SFTConfig(steps=ANS_STEPS,batch_size=8,lr=1e-4,bf16=True,seed=0,progress=False))
log('answer sft',l[0],l[-1],time.time()-t)
AEVAL=RolloutConfig(max_turns=1,max_new_tokens=12,temperature=0.0,batch_size=64,progress=False)
def answer_eval(name, records_or_banks):
    tasks=[]
    for d,b in zip(held,records_or_banks): tasks+=M.answer_tasks(d,b,name)
    r=evaluate(answerer,tok,aenv,tasks,AEVAL,label_key='kind',dtype='auto')
    reader=collections.defaultdict(list)
    for d,b in zip(held,records_or_banks):
        for q in d['questions']:
            reader[q['kind']].append(M.gold_answer_in_bank(b,q) if b is not None else float('nan'))
    size=sum(len(b.entries) for b in records_or_banks if b is not None)/len(held) if records_or_banks[0] is not None else float('nan')
    log(name,'EM',round(r.accuracy,3),{k:round(v,3) for k,v in r.by_label().items()},'F1',round(r.mean('f1'),3),'reader',{k:round(sum(v)/len(v),3) for k,v in reader.items()},'size',size)
    return r
for name,f in [('oracle',M.oracle),('append-only',M.append_only),('last-write-wins',M.last_write_wins)]:
    answer_eval(name,[f(d)[0] for d in held])
r=answer_eval('full context',[None]*len(held))
# manager
model,tok=load_policy(None)
mtrain=M.manager_tasks(train)
rng=random.Random(0)
schemas=menv.toolbox_for(mtrain[0]).schemas
convs=[menv.prompt(t)+M.demonstration(t)[1:] for t in mtrain]; rng.shuffle(convs)
t=time.time(); l=sft(model,tok,convs,schemas,SFTConfig(steps=MAN_STEPS,batch_size=8,lr=1e-4,bf16=True,seed=0,progress=False,micro_batch_tokens=2048))
log('manager sft',l[0],l[-1],time.time()-t)
MEVAL=RolloutConfig(max_turns=1,max_new_tokens=48,temperature=0.0,batch_size=64,progress=False)
def manage(tasks): return evaluate(model,tok,menv,tasks,MEVAL,dtype='auto').episodes
def man_eval(name):
    t=time.time()
    recs=M.replay_policy(held,manage)
    log(name,'replay secs',time.time()-t)
    chosen=[o for r in recs for o in r['ops']]; ideal=[tn['op'] for d in held for tn in d['turns']]
    conf=M.op_confusion(chosen,ideal); log(json.dumps(conf))
    answer_eval(name,[r['bank'] for r in recs])
    return recs
recs=man_eval('SFT')
for o,tn in list(zip(recs[0]['episodes'],held[0]['turns']))[:20]: print(tn['text'],'||',o.model_turns[0].content)
if GRPO_STEPS:
    cand=[t for t in mtrain]  # all train tasks
    cfg=grpo_preset(dict(steps=GRPO_STEPS,prompts=4,group=8,lr=float(sys.argv[5])),0,max_turns=1,max_new_tokens=48)
    tr=GRPOTrainer(model,tok,menv,cand,[M.manager_reward],cfg)
    t=time.time(); h=tr.train(); log('grpo secs',time.time()-t)
    for r in h: log({k:round(r[k],3) for k in ('step','reward','reward_std','frac_reward_zero_std','step_time') if k in r})
    man_eval('SFT+GRPO')
log('done')
