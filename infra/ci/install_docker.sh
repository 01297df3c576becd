#!/usr/bin/env bash
# Make a Docker engine answer on this machine: install docker.io if missing, start dockerd in the
# background, wait for `docker info`. Also make a compose CLI available (ensure_compose below).
# Idempotent: a running engine and an installed compose are left alone.
# Meant for CI (root, Debian bookworm, Debian mirror reachable, no Docker Hub) and for development.
set -euo pipefail

LOG=${MEDGYM_DOCKERD_LOG:-/var/log/medgym-dockerd.log}
WAIT_S=${MEDGYM_DOCKERD_WAIT_S:-60}

log() { echo "[install_docker] $*" >&2; }

engine_answers() { timeout 10 docker info >/dev/null 2>&1; }

APT_UPDATED=0
apt_update_once() { [ $APT_UPDATED = 1 ] || { apt-get update -qq; APT_UPDATED=1; }; }

apt_candidate() {  # the version apt would install, or nothing when the sources have no such package
    apt-cache policy "$1" 2>/dev/null | awk '$1 == "Candidate:" && $2 != "(none)" {print $2}'
}

# The compose CLI that tests/test_infra.py runs (`docker compose config` on infra/compose/docker-compose.yml).
# Wanted: the v2 plugin (`docker compose`), from this machine's apt sources: `docker-compose-plugin` where a source
# has it, else Debian's `docker-compose` when its version is 2 or later (Debian ships v2 as the CLI plugin from
# trixie on). Debian bookworm's `docker-compose` is 1.29 (the Python v1, a `docker-compose` command, no plugin):
# it is installed as the fallback, since `docker-compose config` still validates and interpolates a compose file.
# Needs no engine. Never fatal: the sandbox tests need only the engine.
ensure_compose() {
    if timeout 20 docker compose version >/dev/null 2>&1; then
        log "compose: $(docker compose version 2>&1 | head -n 1)"
        return 0
    fi
    if [ "$(id -u)" != 0 ]; then
        log "compose: no \`docker compose\`, and installing it needs root"
        return 0
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt_update_once || { log "compose: apt-get update failed"; return 0; }
    local pkg=docker-compose-plugin version
    version=$(apt_candidate "$pkg")
    if [ -z "$version" ]; then
        pkg=docker-compose
        version=$(apt_candidate "$pkg")
    fi
    if [ -z "$version" ]; then
        log "compose: neither docker-compose-plugin nor docker-compose is in this machine's apt sources"
        return 0
    fi
    local major=${version#*:}  # no epoch
    major=${major%%.*}
    if [ "$pkg" = docker-compose ] && [ "$major" -lt 2 ] 2>/dev/null; then
        if command -v docker-compose >/dev/null 2>&1; then
            log "compose: $(docker-compose version --short 2>/dev/null || echo v1) (v1; no v2 plugin in the apt sources)"
            return 0
        fi
        log "compose: the apt sources have no v2 plugin; installing docker-compose $version (v1) as the fallback"
    else
        log "compose: installing $pkg $version"
    fi
    if ! apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null; then
        log "compose: apt-get install $pkg failed"
        return 0
    fi
    if timeout 20 docker compose version >/dev/null 2>&1; then
        log "compose: $(docker compose version 2>&1 | head -n 1)"
    elif command -v docker-compose >/dev/null 2>&1; then
        log "compose: docker-compose $(docker-compose version --short 2>/dev/null) (no \`docker compose\` plugin)"
    else
        log "compose: $pkg installed, but no compose command answers"
    fi
}

ensure_compose

if command -v docker >/dev/null 2>&1 && engine_answers; then
    log "engine already answers; nothing to do"
    exit 0
fi

if [ "$(id -u)" != 0 ]; then
    log "must run as root to install or start dockerd"
    exit 1
fi

if ! command -v dockerd >/dev/null 2>&1; then
    log "installing docker.io from the Debian archive"
    export DEBIAN_FRONTEND=noninteractive
    apt_update_once
    # policy-rc.d 101 stops the package's init script from starting a daemon we do not control.
    had_policy=0; [ -e /usr/sbin/policy-rc.d ] && had_policy=1
    [ $had_policy = 1 ] || { printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod +x /usr/sbin/policy-rc.d; }
    apt-get install -y -qq --no-install-recommends docker.io >/dev/null
    [ $had_policy = 1 ] || rm -f /usr/sbin/policy-rc.d
fi
# A static client elsewhere on PATH is fine; if none at all, the package's client is used.
command -v docker >/dev/null 2>&1 || { log "no docker client after install"; exit 1; }

# A previous dockerd that died leaves its pid file behind and refuses to start again.
if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then
    rm -f /var/run/docker.pid
fi

start_dockerd() {  # $@: extra flags; returns 0 once `docker info` answers
    log "starting dockerd $*"
    nohup dockerd "$@" >>"$LOG" 2>&1 </dev/null &
    local pid=$! i
    for ((i = 0; i < WAIT_S * 2; i++)); do
        if engine_answers; then log "engine answers (dockerd pid $pid)"; return 0; fi
        kill -0 "$pid" 2>/dev/null || { log "dockerd exited; see $LOG"; return 1; }
        sleep 0.5
    done
    log "dockerd did not answer within ${WAIT_S}s; stopping it"
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
    return 1
}

# If a daemon is already running but not answering yet, just wait for it.
if pgrep -x dockerd >/dev/null 2>&1; then
    for ((i = 0; i < WAIT_S * 2; i++)); do engine_answers && exit 0; sleep 0.5; done
    log "a dockerd is running but does not answer; stop it and rerun"
    exit 1
fi

# Sandboxes run with network_mode=none and the image build needs no network, so when the host forbids
# iptables (nested containers, locked-down CI) the engine may run without a bridge at all.
NO_NET="--iptables=false --ip-masq=false --bridge=none"
for driver in overlay2 vfs; do
    start_dockerd --storage-driver="$driver" && exit 0
    # shellcheck disable=SC2086
    start_dockerd --storage-driver="$driver" $NO_NET && exit 0
done
log "could not start dockerd; last lines of $LOG:"
tail -n 30 "$LOG" >&2 || true
exit 1
