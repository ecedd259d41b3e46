# chinwag: `chinwag run` with config and data on a volume, as a non-root user.
# BASE: any image with Python >= 3.11 and its venv module: the official image by default, or a plain
# Debian one (python3, python3-venv) where the registry of base images is out of reach. CI builds it so
# (tests/deploy/test_image.py). chinwag goes into a venv: Debian's system Python refuses `pip install`
# (PEP 668), and the venv's `python` is on PATH where Debian has only `python3`.
ARG BASE=python:3.11-slim
FROM ${BASE}

# CHINWAG_HTTP_HOST: the published port reaches the ops server (http.host in a config.yaml wins)
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    CHINWAG_HOME=/data \
    CHINWAG_HTTP_HOST=0.0.0.0 \
    PATH=/opt/chinwag/bin:$PATH

# EXTRAS=postgres for storage.backend: postgres (deploy/compose.yaml builds it so)
ARG EXTRAS=""
WORKDIR /app
COPY pyproject.toml README.md ./
COPY gateway ./gateway
COPY platforms ./platforms
COPY agent ./agent
COPY tools ./tools
# the cache mount keeps pip's downloads between builds and out of the image (BuildKit, the default
# builder since Docker 23, and podman/buildah understand it)
RUN --mount=type=cache,target=/root/.cache/pip \
    python3 -m venv /opt/chinwag \
    && pip install ".${EXTRAS:+[$EXTRAS]}" \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin chinwag \
    && mkdir -p /data && chown chinwag:chinwag /data

USER chinwag
VOLUME ["/data"]
# health, readiness, metrics, webhooks and the console (0.0.0.0 inside the container: CHINWAG_HTTP_HOST)
EXPOSE 8765
HEALTHCHECK --interval=30s --timeout=5s CMD python -c "import urllib.request,sys; urllib.request.urlopen('http://127.0.0.1:8765/healthz', timeout=4)" || exit 1
CMD ["chinwag", "run"]
