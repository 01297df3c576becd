#!/usr/bin/env bash
# Build medgym-sandbox:<version> without any image registry. Idempotent: does nothing if the image exists.
#  1. base image medgym-sandbox-base:<hash of packages.txt>: debootstrap a minimal Debian bookworm with the
#     packages of packages.txt from the Debian mirror, trim it, `docker import` it;
#  2. `docker build` Dockerfile FROM that base (adds the user and runner.py; needs no network).
# <version> is a hash of Dockerfile, runner.py and packages.txt; components/sandbox/docker_image.py computes
# the same hash, so the code always asks for the image that matches its runner.
# Prints the image name on stdout.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MIRROR=${MEDGYM_DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm

log() { echo "[build_image] $*" >&2; }

version=$(cat "$HERE/Dockerfile" "$HERE/runner.py" "$HERE/packages.txt" | sha256sum | cut -c1-12)
base_version=$(sha256sum <"$HERE/packages.txt" | cut -c1-12)
IMAGE=medgym-sandbox:$version
BASE=medgym-sandbox-base:$base_version

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE already present"
    echo "$IMAGE"
    exit 0
fi

if ! docker image inspect "$BASE" >/dev/null 2>&1; then
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    fi
    work=$(mktemp -d /var/tmp/medgym-rootfs.XXXXXX)
    trap 'rm -rf "$work"' EXIT
    packages=$(grep -v -e '^#' -e '^-' -e '^\s*$' "$HERE/packages.txt" | paste -sd, -)
    drop=$(grep -e '^-' "$HERE/packages.txt" | cut -c2- | paste -sd' ' -)
    log "debootstrap $SUITE (+ $packages) from $MIRROR"
    debootstrap --variant=minbase --include="$packages" "$SUITE" "$work/root" "$MIRROR" >"$work/debootstrap.log" 2>&1 \
        || { tail -n 40 "$work/debootstrap.log" >&2; exit 1; }
    # shellcheck disable=SC2086
    installed=$(chroot "$work/root" dpkg-query -W -f '${Package}\n' $drop 2>/dev/null || true)
    # shellcheck disable=SC2086
    [ -z "$installed" ] || chroot "$work/root" dpkg --purge --force-depends $installed >>"$work/debootstrap.log" 2>&1
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
# The legacy builder needs no buildx plugin and no registry; --network none proves the build is offline.
DOCKER_BUILDKIT=0 docker build --quiet --network none --build-arg "BASE=$BASE" \
    --label "medgym.sandbox.version=$version" -t "$IMAGE" "$HERE" >/dev/null
docker tag "$IMAGE" medgym-sandbox:latest
log "built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"
echo "$IMAGE"
