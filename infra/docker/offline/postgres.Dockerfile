# The compose stack's PostgreSQL (MLflow's and Prefect's databases) on the debootstrapped base: Debian's
# postgresql-15, started by postgres-entrypoint.sh with the environment and init folder of the postgres image
# (POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB, /docker-entrypoint-initdb.d), so docker-compose.yml's service
# runs on it unchanged. Built by build.sh with no network.
ARG BASE
FROM ${BASE}
COPY postgres-entrypoint.sh /usr/local/bin/postgres-entrypoint.sh
RUN chmod 755 /usr/local/bin/postgres-entrypoint.sh && mkdir -p /docker-entrypoint-initdb.d
ENV PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PGDATA=/var/lib/postgresql/data \
    LANG=C.UTF-8
EXPOSE 5432
STOPSIGNAL SIGINT
ENTRYPOINT ["/usr/local/bin/postgres-entrypoint.sh"]
