#!/usr/bin/env bash
# Build medgym-sandbox:<version> without any image registry. Idempotent: does nothing if the image exists.
#  1. base image medgym-sandbox-base:<hash of packages.txt and runtime.lock>: debootstrap a minimal Debian bookworm
#     with the packages of packages.txt, add the task runtime (a venv with exactly the wheels of
#     components/sandbox/runtime.lock, installed by the host's pip, as the process backend's is), `docker import`;
#  2. `docker build` Dockerfile FROM that base (adds the user and the runner; needs no network).
# <version> is a hash of Dockerfile, runner.py, packages.txt and runtime.lock; components/sandbox/docker_image.py
# computes the same hash, so the code always asks for the image that matches its runner.
# The Debian mirror is the machine's own (its apt sources); MEDGYM_DEBIAN_MIRROR overrides. Python packages come
# from pip's own configuration. MEDGYM_PYTHON names the host interpreter (CPython 3.11, as the image's).
# Prints the image name on stdout.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
SANDBOX=$(cd "$HERE/../../components/sandbox" && pwd)
SUITE=bookworm
PY=${MEDGYM_PYTHON:-python3}

log() { echo "[build_image] $*" >&2; }

apt_mirror() {  # the first non-security archive of the machine's apt sources (deb822, then one-line format)
    local uri
    uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)
    if [ -z "$uri" ]; then
        uri=$(awk '$1 == "deb" { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { if ($i !~ /security/) { print $i; exit } } }' \
            /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true)
    fi
    echo "$uri"
}

version=$(cat "$HERE/Dockerfile" "$SANDBOX/runner.py" "$HERE/packages.txt" "$SANDBOX/runtime.lock" | sha256sum | cut -c1-12)
base_version=$(cat "$HERE/packages.txt" "$SANDBOX/runtime.lock" | sha256sum | cut -c1-12)
IMAGE=medgym-sandbox:$version
BASE=medgym-sandbox-base:$base_version

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE already present"
    echo "$IMAGE"
    exit 0
fi

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    MIRROR=${MEDGYM_DEBIAN_MIRROR:-$(apt_mirror)}
    [ -n "$MIRROR" ] || { log "no Debian mirror in the apt sources; set MEDGYM_DEBIAN_MIRROR"; exit 1; }
    pyver=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    fi
    work=$(mktemp -d /var/tmp/medgym-rootfs.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    packages=$(grep -v -e '^#' -e '^\s*$' "$HERE/packages.txt" | paste -sd, -)
    log "debootstrap $SUITE (+ $packages)"
    debootstrap --variant=minbase --include="$packages" "$SUITE" "$work/root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 40 "$work/debootstrap.log" >&2; exit 1; }
    image_pyver=$(chroot "$work/root" python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
    [ "$pyver" = "$image_pyver" ] || { log "$PY is Python $pyver, the image's is $image_pyver"; exit 1; }
    log "installing the task runtime (runtime.lock) into /opt/medgym/env"
    chroot "$work/root" python3 -m venv --without-pip /opt/medgym/env
    "$PY" -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps --only-binary=:all: \
        --target "$work/root/opt/medgym/env/lib/python$pyver/site-packages" -r "$SANDBOX/runtime.lock"
    # Nothing in the sandbox installs packages or reads manuals; drop caches, docs and locales.
    rm -rf "$work/root"/usr/include/* "$work/root"/var/lib/apt/lists/* "$work/root"/var/cache/apt/* "$work/root"/var/cache/debconf/*-old \
        "$work/root"/usr/share/doc/* "$work/root"/usr/share/man/* "$work/root"/usr/share/info/* \
        "$work/root"/usr/share/locale/* "$work/root"/var/log/* "$work/root"/tmp/*
    log "importing $BASE ($(du -sh "$work/root" | cut -f1))"
    tar --numeric-owner -C "$work/root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
    rm -rf "$work"
    trap - EXIT
fi

log "building $IMAGE FROM $BASE"
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$HERE/Dockerfile" "$SANDBOX/runner.py" "$context/"
# The legacy builder needs no buildx plugin and no registry; --network none proves the build is offline.
DOCKER_BUILDKIT=0 docker build --quiet --network none --build-arg "BASE=$BASE" \
    --label "medgym.sandbox.version=$version" -t "$IMAGE" "$context" >/dev/null
docker tag "$IMAGE" medgym-sandbox:latest
log "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$IMAGE"
