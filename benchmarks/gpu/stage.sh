#!/bin/bash
# Call 1 of a gpu-profile run on a lent GPU machine (benchmarks/gpu/README.md): install the carried wheels, keep
# the first part of the compressed model, and check the GPU plumbing with a tiny model (sanity.py).
set -euo pipefail
S=/root/agentrl_stage
mkdir -p "$S"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$S/site" .whl/*.whl
cp .gguf/a "$S/a" && cp -r .gguf/tok "$S/tok"
export PYTHONPATH="$S/site:$PWD"
python3 -c "import torch, transformers, trl, peft, datasets, papermill, ipykernel, bm25s, math_verify, gguf, pyarrow;
print('torch', torch.__version__, 'transformers', transformers.__version__, 'trl', trl.__version__, 'pyarrow', pyarrow.__version__)"
[ "${SANITY:-1}" = 0 ] || PYTHONUNBUFFERED=1 python3 benchmarks/gpu/sanity.py "$S/tok" 2>&1 | grep -v -i warn
