# The MLflow tracking server of infra/compose/docker-compose.yml: mlflow, psycopg2 for the postgres backend store,
# boto3 for the s3:// artifact destination (MinIO). The command (store URIs, host, port) comes from compose.
#
#   docker build -f infra/docker/mlflow.Dockerfile -t medgym-mlflow infra/docker
#
# MLFLOW_VERSION must equal pyproject.toml's mlflow pin: the clients (every medgym command) and the server share
# the backend store, whose schema each MLflow version migrates to its own.
ARG PYTHON_VERSION=3.11
FROM python:${PYTHON_VERSION}-slim-bookworm

ARG MLFLOW_VERSION=3.17.2
ARG PSYCOPG2_VERSION=2.9.13
ARG BOTO3_VERSION=1.44.5

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    MLFLOW_DISABLE_TELEMETRY=true \
    DO_NOT_TRACK=1

RUN pip install "mlflow==${MLFLOW_VERSION}" "psycopg2-binary==${PSYCOPG2_VERSION}" "boto3==${BOTO3_VERSION}" \
 && python -c "import mlflow, psycopg2, boto3; print('mlflow', mlflow.__version__)" \
 && useradd --uid 1000 --user-group --create-home --home-dir /home/mlflow --shell /usr/sbin/nologin mlflow

USER mlflow
WORKDIR /home/mlflow
EXPOSE 5000

HEALTHCHECK --interval=10s --timeout=10s --start-period=30s --retries=30 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:5000/health', timeout=5)"]

CMD ["mlflow", "server", "--host", "0.0.0.0", "--port", "5000"]
