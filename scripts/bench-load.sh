#!/usr/bin/env bash
# bench-load.sh: measure the check API over HTTP with cmd/loadgen.
# Starts throwaway Postgres and Redis, seeds the demo, runs one api process,
# then loadgen with each concurrency in $CLIENTS (default "16 64 256") for
# $DURATION (default 10s), authenticated (1000 pro keys) and anonymous.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build
exec scripts/services.sh test -- bash -c '
set -euo pipefail
export TOLLGATE_DATABASE_URL=$TOLLGATE_TEST_DATABASE_URL TOLLGATE_REDIS_ADDR=$TOLLGATE_TEST_REDIS_ADDR
TOLLGATE_SECRET_KEY=$(bin/admin secrets generate) # a throwaway one, for the throwaway database
export TOLLGATE_SECRET_KEY
bin/admin migrate up >/dev/null
token=$(bin/admin seed demo --json | sed -n "s/.*\"service_token\": \"\([^\"]*\)\".*/\1/p")
tenant=demo-pro
keys=$(bin/admin keys issue --tenant $tenant --count 1000 2>/dev/null | paste -sd, -)
TOLLGATE_API_ADDR=127.0.0.1:18080 TOLLGATE_LOG_LEVEL=warn bin/api & api=$!
trap "kill $api; wait $api" EXIT
for _ in $(seq 1 100); do curl -fs http://127.0.0.1:18080/readyz >/dev/null && break; sleep 0.1; done
for c in ${CLIENTS:-16 64 256}; do
  echo "== authenticated, $c clients"
  bin/loadgen -url http://127.0.0.1:18080 -token "$token" -keys "$keys" -c $c -d ${DURATION:-10s}
  echo "== anonymous, $c clients"
  bin/loadgen -url http://127.0.0.1:18080 -token "$token" -ips 100000 -c $c -d ${DURATION:-10s}
done
'
