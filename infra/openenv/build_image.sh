#!/usr/bin/env bash
# Build medgym-openenv: MedGym's coding environment as an OpenEnv server image, the way the sandbox image is built
# (infra/sandbox/build_image.sh): FROM the debootstrapped Debian base that script imports without any registry, the
# Python packages installed by the host's pip into the build context, `docker build --network none`. So nothing is
# pulled and the build runs offline; pip reads its own configuration (index or wheelhouse).
#
#   bash infra/openenv/build_image.sh                 # prints the image name
#   docker run --rm -p 8000:8000 -v /var/run/docker.sock:/var/run/docker.sock \
#       -v "$PWD/data/demo:/tasks:ro" -e MEDGYM_TASKS=/tasks/tasks.jsonl medgym-openenv
#
# The agent's code runs in medgym-sandbox containers beside the server's (the docker backend over the mounted
# socket), never in the server's container, which holds the task file and its answers.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
PY=${MEDGYM_PYTHON:-python3}
log() { echo "[openenv build_image] $*" >&2; }

bash "$ROOT/infra/sandbox/build_image.sh" >/dev/null  # the base and the sandbox image the server's backend runs
base=$(cat "$ROOT/infra/sandbox/packages.txt" "$ROOT/components/sandbox/runtime.lock" | sha256sum | cut -c1-12)
openenv=$(grep -o 'openenv-core==[0-9.]*' "$ROOT/Makefile")

context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
log "installing the server's packages (requirements.txt, $openenv) for Python $pyver"
"$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: \
    --target "$context/site-packages" -r "$HERE/requirements.txt" "$openenv"
mkdir -p "$context/infra"
cp -r "$ROOT/components" "$context/components"
cp -r "$ROOT/infra/sandbox" "$context/infra/sandbox"
cp "$HERE/Dockerfile" "$context/Dockerfile"
find "$context" -name __pycache__ -prune -exec rm -rf {} +
version=$(cd "$context" && find components infra Dockerfile -type f -print0 | sort -z | xargs -0 cat | sha256sum | cut -c1-12)
IMAGE=medgym-openenv:$version
DOCKER_BUILDKIT=0 docker build --quiet --network none --build-arg "BASE=medgym-sandbox-base:$base" -t "$IMAGE" "$context" >/dev/null
docker tag "$IMAGE" medgym-openenv:latest
log "built $IMAGE"
echo "$IMAGE"
