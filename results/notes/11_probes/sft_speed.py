import time, random
from agentrl_lite.tasks import memory as M
from agentrl_lite.models import load_policy
from agentrl_lite.sft import SFTConfig, sft
from agentrl_lite.tasks import DATA_DIR, read_jsonl
model,tok=load_policy(None)
env=M.MemoryManagerEnv()
tasks=M.manager_tasks(read_jsonl(DATA_DIR/'memory_train.jsonl')[:30])
schemas=env.toolbox_for(tasks[0]).schemas
convs=[env.prompt(t)+M.demonstration(t)[1:] for t in tasks]; random.Random(0).shuffle(convs)
for mbt in (2048, 4096, 1024):
    t=time.time(); sft(model,tok,convs,schemas,SFTConfig(steps=3,batch_size=8,lr=1e-5,bf16=True,seed=0,progress=False,micro_batch_tokens=mbt)); print(mbt,'per step',(time.time()-t)/3, flush=True)
# no tools: answer rows
aenv=M.AnswerEnv()
ad=M.answer_demonstrations(read_jsonl(DATA_DIR/'memory_train.jsonl')[:30],3)
ac=[aenv.prompt(t)+aenv.demonstration(t) for t in ad if t['source']!='full context']
t=time.time(); sft(model,tok,ac,None,SFTConfig(steps=3,batch_size=8,lr=1e-5,bf16=True,seed=0,progress=False)); print('answer per step',(time.time()-t)/3)
t=time.time(); sft(model,tok,ac,None,SFTConfig(steps=3,batch_size=16,lr=1e-5,bf16=True,seed=0,progress=False,micro_batch_tokens=4096)); print('answer b16 per step',(time.time()-t)/3)
