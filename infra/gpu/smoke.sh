#!/usr/bin/env bash
# The GPU smoke, one command: ZeRO-3 SFT and DPO of a random 0.5B-class model with a 152k vocabulary, the
# verifier's scoring on the GPU, two GRPO steps and a vLLM engine where there is one, each with its throughput and
# peak memory (bench/gpu_smoke.py says what and why). Offline: what of the training libraries the Python lacks is
# installed from infra/gpu/wheels/ (`make gpu-wheels`, where there is a network). Under 10 minutes on one H100.
#
#   bash infra/gpu/smoke.sh               # on a GPU machine
#   bash infra/gpu/smoke.sh --cpu-tiny    # the same path on a CPU, tiny shape
#
# The Python: MEDGYM_PYTHON, else the repository's .venv where it exists, else python3.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
if [ -n "${MEDGYM_PYTHON:-}" ]; then
    PY=$MEDGYM_PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then
    PY=$ROOT/.venv/bin/python
else
    PY=python3
fi
cd "$ROOT"
exec env PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 "$PY" -m bench.gpu_smoke "$@"
