#!/bin/sh
# Runs once, on the first start of an empty data volume (the postgres image's /docker-entrypoint-initdb.d):
# the image creates POSTGRES_DB (MLflow's backend store); this adds PREFECT_DB (the Prefect server's database).
# No `exit`: the entrypoint sources a script that lost its executable bit, and an exit would end the entrypoint.
set -eu

if [ -n "${PREFECT_DB:-}" ] && [ "$PREFECT_DB" != "$POSTGRES_DB" ]; then
    psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname "$POSTGRES_DB" --set db="$PREFECT_DB" <<'EOSQL'
SELECT format('CREATE DATABASE %I', :'db') WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db')\gexec
EOSQL
    echo "init-databases: database $PREFECT_DB ready"
else
    echo "init-databases: no separate Prefect database requested"
fi
