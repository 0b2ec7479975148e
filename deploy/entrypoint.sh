#!/bin/sh
# The container's (and a VM unit's) start: seed the data directory on first boot, restore the database from its
# replica when the volume has none, then run the server under `litestream replicate -exec` so every commit is
# shipped. Without a replica configured the server runs alone (and says so). On PostgreSQL (FLUX7_DATABASE_URL,
# DATABASE_URL as `fly postgres attach` sets it, or `database:` in the config) there is no file to replicate or
# restore: the server runs alone and the database is backed up with the server's own tools (docs/deploy.md).
set -eu

DATA="${FLUX7_DATA:-/data}"
APP="${FLUX7_APP:-/app}"
HOST="${FLUX7_HOST:-0.0.0.0}"
PORT="${FLUX7_PORT:-8080}"
FLUX7="${FLUX7_BIN:-flux7}"
LITESTREAM="${FLUX7_LITESTREAM:-litestream}"
export FLUX7_DATA="$DATA"
export LITESTREAM_CONFIG="${LITESTREAM_CONFIG:-$APP/litestream.yml}"

# Fly's Tigris (`fly storage create`) sets these; build the replica URL from them when none is given.
if [ -z "${LITESTREAM_REPLICA_URL:-}" ] && [ -n "${BUCKET_NAME:-}" ]; then
  LITESTREAM_REPLICA_URL="s3://${BUCKET_NAME}/flux7?endpoint=${AWS_ENDPOINT_URL_S3:-https://fly.storage.tigris.dev}&region=${AWS_REGION:-auto}"
fi
export LITESTREAM_REPLICA_URL="${LITESTREAM_REPLICA_URL:-}"

mkdir -p "$DATA"
# `fly postgres attach` (and most managed PostgreSQL add-ons) hand the URL over as DATABASE_URL.
if [ -z "${FLUX7_DATABASE_URL:-}" ]; then
  case "${DATABASE_URL:-}" in
    postgres://* | postgresql://*) export FLUX7_DATABASE_URL="$DATABASE_URL" ;;
  esac
fi
POSTGRES=""
SEED="$APP/deploy/config.production.yaml"
case "${FLUX7_DATABASE_URL:-}" in
  postgres://* | postgresql://*) POSTGRES=1 SEED="$APP/deploy/config.postgres.yaml" ;;
esac

# First boot: the production config (its PostgreSQL variant on PostgreSQL: shared secrets, no trace file) and the
# example policies, editable afterwards on the volume.
[ -f "$DATA/config.yaml" ] || cp "$SEED" "$DATA/config.yaml"
[ -d "$DATA/policies" ] || cp -r "$APP/policies" "$DATA/policies"

SERVE="$FLUX7 serve --config $DATA/config.yaml --host $HOST --port $PORT"

if [ -z "$POSTGRES" ] && grep -Eq "^database:[[:space:]]*[\"']?postgres(ql)?://" "$DATA/config.yaml"; then
  POSTGRES=1
fi
if [ -n "$POSTGRES" ]; then
  echo "flux7: the database is PostgreSQL: no Litestream here (back it up with pg_dump or the provider's PITR)" >&2
  exec $SERVE
fi
if [ -z "$LITESTREAM_REPLICA_URL" ]; then
  echo "flux7: LITESTREAM_REPLICA_URL is not set: the database is NOT replicated" >&2
  exec $SERVE
fi

# An empty volume with a replica: restore it (and re-create the workspace and trace file from it) before serving.
# The first boot of a new deployment finds no replica and starts empty. A volume that has its database skips
# this (no Python start before the server's own: a stopped machine wakes on a request).
if [ ! -f "$DATA/flux7.db" ]; then
  $FLUX7 restore --config "$DATA/config.yaml" --litestream "$LITESTREAM_CONFIG" --if-db-not-exists --if-replica-exists
fi
exec "$LITESTREAM" replicate -config "$LITESTREAM_CONFIG" -exec "$SERVE"
