import time, collections, json, sys, random
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
ds=M.memory_dialogues(); train=[d for d in ds if d['split']=='train']; val=[d for d in ds if d['split']=='validation'][:10]
K=int(sys.argv[1]); ALR=float(sys.argv[2]); ASTEPS=int(sys.argv[3]); MSTEPS=int(sys.argv[4]); GSTEPS=int(sys.argv[5]); GLR=float(sys.argv[6])
aenv=M.AnswerEnv(); menv=M.MemoryManagerEnv()
answerer,tok=load_policy(None)
demos=[t for t in M.answer_demonstrations(train,K) if t['source']!='full context']; random.Random(0).shuffle(demos)
t=time.time(); l=sft(answerer,tok,[aenv.prompt(t)+aenv.demonstration(t) for t in demos],None,SFTConfig(steps=ASTEPS,batch_size=8,lr=ALR,bf16=True,seed=0,progress=False))
log('answer sft',l[0],l[-1],time.time()-t)
AEVAL=RolloutConfig(max_turns=1,max_new_tokens=12,temperature=0.0,batch_size=64,progress=False)
def answer_eval(name, banks):
    tasks=[x for d,b in zip(val,banks) for x in M.answer_tasks(d,b,name,K)]
    r=evaluate(answerer,tok,aenv,tasks,AEVAL,label_key='kind',dtype='auto')
    reader=collections.defaultdict(list)
    for d,b in zip(val,banks):
        for q in d['questions']:
            if b is not None: reader[q['kind']].append(M.gold_answer_in_bank(b,q))
    log(name,'EM',round(r.accuracy,3),{k:round(v,3) for k,v in r.by_label().items()},'reader',{k:round(sum(v)/len(v),3) for k,v in reader.items()})
for name,f in [('oracle',M.oracle),('append-only',M.append_only),('last-write-wins',M.last_write_wins)]:
    answer_eval(name,[f(d)[0] for d in val])
answer_eval('full context',[None]*len(val))
model,tok=load_policy(None)
mtrain=M.manager_tasks(train)
schemas=menv.toolbox_for(mtrain[0]).schemas
convs=[menv.prompt(t)+M.demonstration(t)[1:] for t in mtrain]; random.Random(0).shuffle(convs)
t=time.time(); l=sft(model,tok,convs,schemas,SFTConfig(steps=MSTEPS,batch_size=8,lr=1e-4,bf16=True,seed=0,progress=False,micro_batch_tokens=2048))
log('manager sft',l[0],l[-1],time.time()-t)
MEVAL=RolloutConfig(max_turns=1,max_new_tokens=48,temperature=0.0,batch_size=64,progress=False)
def man_eval(name):
    t=time.time()
    recs=M.replay_policy(val,M.model_manager(model,tok,MEVAL))
    log(name,'replay secs',time.time()-t)
    chosen=[o for r in recs for o in r['ops']]; ideal=[tn['op'] for d in val for tn in d['turns']]
    log(json.dumps(M.op_confusion(chosen,ideal)))
    answer_eval(name,[r['bank'] for r in recs])
man_eval('SFT')
hard=[t for t in mtrain if t['event'] in ('change','correct','retract','repeat')]
easy=random.Random(1).sample([t for t in mtrain if t['event'] not in ('change','correct','retract','repeat')],len(hard))
log('practice',len(hard),len(easy))
cfg=grpo_preset(dict(steps=GSTEPS,prompts=4,group=8,lr=GLR),0,max_turns=1,max_new_tokens=48,micro_batch_tokens=2048)
tr=GRPOTrainer(model,tok,menv,hard+easy,[M.manager_reward],cfg)
t=time.time(); h=tr.train(); log('grpo secs',time.time()-t)
for r in h: log({k:round(r[k],3) for k in ('step','reward','reward_std','frac_reward_zero_std','step_time') if k in r})
man_eval('SFT+GRPO')
log('done')
