#!/bin/sh
# PostgreSQL for the offline compose stack, started the way the postgres image starts it, for what
# docker-compose.yml uses of that: on an empty PGDATA, a cluster whose superuser is POSTGRES_USER with
# POSTGRES_PASSWORD (scram over TCP, trust on the socket inside the container), the database POSTGRES_DB, then the
# scripts of /docker-entrypoint-initdb.d run (executable ones) or sourced (others) against a server listening on
# its socket only; then the server on every interface. Runs as root only to hand PGDATA to the postgres user.
set -eu

: "${PGDATA:=/var/lib/postgresql/data}"
: "${POSTGRES_USER:=postgres}"
: "${POSTGRES_DB:=$POSTGRES_USER}"

if [ "$(id -u)" = 0 ]; then
    mkdir -p "$PGDATA" /var/run/postgresql
    chown postgres:postgres "$PGDATA" /var/run/postgresql
    chmod 700 "$PGDATA"
    exec runuser -u postgres -- "$0" "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
    : "${POSTGRES_PASSWORD:?postgres-entrypoint: POSTGRES_PASSWORD is not set}"
    pwfile=$(mktemp)
    printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
    initdb -D "$PGDATA" --username="$POSTGRES_USER" --pwfile="$pwfile" --auth-local=trust --auth-host=scram-sha-256 \
        --encoding=UTF8 --locale=C.UTF-8 >/dev/null
    rm -f "$pwfile"
    echo "host all all all scram-sha-256" >>"$PGDATA/pg_hba.conf"
    pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w start >/dev/null
    if [ "$POSTGRES_DB" != postgres ]; then
        psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres --set db="$POSTGRES_DB" <<'EOSQL'
CREATE DATABASE :"db";
EOSQL
    fi
    for f in /docker-entrypoint-initdb.d/*.sh; do
        [ -e "$f" ] || continue
        echo "postgres-entrypoint: running $f"
        if [ -x "$f" ]; then "$f"; else . "$f"; fi
    done
    pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
    echo "postgres-entrypoint: cluster initialized in $PGDATA"
fi

exec postgres -D "$PGDATA" -c listen_addresses='*'
