#!/bin/sh
# The container's (and a VM unit's) start: seed the data directory on first boot, restore the database from its
# replica when the volume has none, then run the server under `litestream replicate -exec` so every commit is
# shipped. Without a replica configured the server runs alone (and says so).
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
# First boot: the production config and the example policies, editable afterwards on the volume.
[ -f "$DATA/config.yaml" ] || cp "$APP/deploy/config.production.yaml" "$DATA/config.yaml"
[ -d "$DATA/policies" ] || cp -r "$APP/policies" "$DATA/policies"

SERVE="$FLUX7 serve --config $DATA/config.yaml --host $HOST --port $PORT"
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
