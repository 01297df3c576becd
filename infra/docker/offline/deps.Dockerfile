# The compose stack's Python packages on the debootstrapped base: the context's site-packages/ (installed there by
# the host's pip, build.sh) into the interpreter's own site directory, so .pth files apply and no PYTHONPATH is
# needed; their console scripts (mlflow, prefect, moto_server) into /usr/local/bin. Built with no network.
ARG BASE
FROM ${BASE}
COPY site-packages/ /usr/local/lib/python3.11/dist-packages/
COPY bin/ /usr/local/bin/
ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    LANG=C.UTF-8 \
    DO_NOT_TRACK=1 \
    MLFLOW_DISABLE_TELEMETRY=true
RUN python -c "import mlflow, prefect, psycopg2, asyncpg, boto3, moto.server, torch, transformers; print('mlflow', mlflow.__version__, 'prefect', prefect.__version__)"
