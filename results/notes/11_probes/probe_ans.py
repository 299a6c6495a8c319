import time, collections, sys, random
from agentrl_lite import seed_everything
from agentrl_lite.tasks import memory as M
from agentrl_lite.models import load_policy
from agentrl_lite.evaluate import evaluate
from agentrl_lite.rollout import RolloutConfig
from agentrl_lite.sft import SFTConfig, sft
T0=time.time()
def log(*a): print(f"[{time.time()-T0:6.0f}s]",*a, flush=True)
seed_everything(0)
ds=M.memory_dialogues(); train=[d for d in ds if d['split']=='train']; val=[d for d in ds if d['split']=='validation']
STEPS=int(sys.argv[1]); LR=float(sys.argv[2]); BATCH=int(sys.argv[3])
aenv=M.AnswerEnv()
answerer,tok=load_policy(None)
demos=[t for t in M.answer_demonstrations(train) if t['source']!='full context']; random.Random(0).shuffle(demos)
convs=[aenv.prompt(t)+aenv.demonstration(t) for t in demos]
t=time.time(); l=sft(answerer,tok,convs,None,SFTConfig(steps=STEPS,batch_size=BATCH,lr=LR,bf16=True,seed=0,progress=False))
log('answer sft',l[0],l[-1],time.time()-t)
AEVAL=RolloutConfig(max_turns=1,max_new_tokens=12,temperature=0.0,batch_size=64,progress=False)
for name,f in [('oracle',M.oracle),('append-only',M.append_only)]:
    tasks=[x for d in val for x in M.answer_tasks(d,f(d)[0],name)]
    r=evaluate(answerer,tok,aenv,tasks,AEVAL,label_key='kind',dtype='auto')
    log(name,'EM',round(r.accuracy,3),{k:round(v,3) for k,v in r.by_label().items()})
    if name=='oracle':
        for ep,tk in list(zip(r.episodes,tasks))[:40]:
            if not ep.metadata['score']['correct']: print('  WRONG', repr(ep.model_turns[-1].content), '| gold', tk['answer'], '|', tk['question'], '|', tk['memories'].replace('\n',' / '))
