#!/usr/bin/env bash
# run-local.sh: run by `make run` inside scripts/services.sh with
# TOLLGATE_DATABASE_URL and TOLLGATE_REDIS_ADDR set. Migrates, seeds the
# demo, starts api, admin and the webhook sink the demo's endpoints send
# to, prints how to use them, and waits.
#
# On Ctrl-C (or SIGTERM) it stops them in order, so that no check is lost:
# the api first (it publishes its last usage batch as it stops), then,
# once the usage worker inside admin has applied the stream, admin, then
# the sink. services.sh then stops Redis and Postgres.
set -euo pipefail
bin=./bin
# The demo's secret key (it seals the service-token signing keys) is made
# once and kept beside the demo data in the git-ignored .local/.
if [ -z "${TOLLGATE_SECRET_KEY:-}" ]; then
  mkdir -p .local
  [ -s .local/secret_key ] || (umask 077; "$bin/admin" secrets generate > .local/secret_key)
  TOLLGATE_SECRET_KEY=$(cat .local/secret_key)
  export TOLLGATE_SECRET_KEY
fi
api_addr=${TOLLGATE_API_ADDR:-127.0.0.1:8080}
admin_addr=${TOLLGATE_ADMIN_ADDR:-127.0.0.1:8081}
# The servers' addresses must be free: another instance answering on them
# would pass for this one. (The webhook sink's, fixed by the demo's
# endpoints, is checked when it starts: without it deliveries are retried.)
taken() { local host=${1%:*}; (exec 3<>"/dev/tcp/${host:-127.0.0.1}/${1##*:}") 2>/dev/null; }
for pair in "$api_addr TOLLGATE_API_ADDR" "$admin_addr TOLLGATE_ADMIN_ADDR"; do
  set -- $pair
  if taken "$1"; then
    echo "run-local: $1 is taken (is another make run up? set $2 to another address)" >&2
    exit 1
  fi
done
"$bin/admin" migrate up
seed=$("$bin/admin" seed demo --json)
field() { printf '%s' "$seed" | sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p"; }
token=$(field service_token)
pro=$(field pro)
free=$(field free)
enterprise=$(field enterprise)
prepaid=$(field prepaid)
# The seed prints users by role: operator, tenant_admin, tenant_viewer.
op_email=$(field email | sed -n 1p)
op_password=$(field password | sed -n 1p)
ta_email=$(field email | sed -n 2p)
ta_password=$(field password | sed -n 2p)
tv_email=$(field email | sed -n 3p)
tv_password=$(field password | sed -n 3p)
export TOLLGATE_API_ADDR=$api_addr TOLLGATE_ADMIN_ADDR=$admin_addr
# One session secret for every run, kept in .local/: logins survive a
# restart. (Set TOLLGATE_ADMIN_JWT_SECRET to use another.)
if [ -z "${TOLLGATE_ADMIN_JWT_SECRET:-}" ]; then
  secret_file=.local/admin-jwt-secret
  if [ ! -s "$secret_file" ]; then
    (umask 077 && head -c 48 /dev/urandom | base64 | tr -d '\n' >"$secret_file")
  fi
  TOLLGATE_ADMIN_JWT_SECRET=$(cat "$secret_file")
  export TOLLGATE_ADMIN_JWT_SECRET
fi
# The demo's webhook endpoints send to the sink on loopback
# (cmd/webhook-sink, 127.0.0.1:8082), which the deliverers refuse unless
# its address is allowed: that one address and port, no other private
# one (nor the api's or admin's own ports on loopback).
export TOLLGATE_WEBHOOK_ALLOW_ADDRS=${TOLLGATE_WEBHOOK_ALLOW_ADDRS:-127.0.0.1:8082}
sink_log=.local/webhook-sink.log
stream=${TOLLGATE_USAGE_STREAM:-tollgate:usage}
redis_host=${TOLLGATE_REDIS_ADDR%:*}
redis_port=${TOLLGATE_REDIS_ADDR##*:}

api_pid=""
admin_pid=""
sink_pid=""

# stop_process PID: SIGTERM, then wait until it has exited (a second
# signal to this script must not cut the wait short).
stop_process() {
  [ -n "$1" ] || return 0
  kill -TERM "$1" 2>/dev/null || true
  while kill -0 "$1" 2>/dev/null; do wait "$1" 2>/dev/null || true; done
}

# backlog prints how many usage batches wait in the stream (applied ones
# are deleted from it).
backlog() { redis-cli -h "$redis_host" -p "$redis_port" XLEN "$stream" 2>/dev/null || echo "?"; }

stopping=""
shutdown() {
  [ -z "$stopping" ] || return 0
  stopping=1
  trap '' INT TERM
  echo
  echo "stopping: api (publishing its last usage)…"
  stop_process "$api_pid"
  if [ -n "$admin_pid" ] && kill -0 "$admin_pid" 2>/dev/null && [ "${TOLLGATE_SERVE_WORKER:-true}" != false ]; then
    echo "stopping: admin, once the usage worker has applied the stream…"
    for _ in $(seq 1 100); do
      [ "$(backlog)" = 0 ] && break
      sleep 0.1
    done
  fi
  stop_process "$admin_pid"
  stop_process "$sink_pid"
  left=$(backlog)
  if [ "$left" != 0 ]; then
    echo "  $left usage batches not applied yet: they stay in Redis (.local/redis) and are applied on the next run"
  fi
}
trap 'shutdown; exit 0' INT TERM
trap shutdown EXIT

# The servers run in their own process groups (set -m): Ctrl-C reaches
# only the scripts, and shutdown stops the servers in order.
set -m
# The sink first: admin's deliverers may send at once.
mkdir -p .local
"$bin/webhook-sink" >>"$sink_log" 2>&1 &
sink_pid=$!
"$bin/api" &
api_pid=$!
"$bin/admin" serve &
admin_pid=$!
set +m

for _ in $(seq 1 100); do
  if ! kill -0 "$api_pid" 2>/dev/null || ! kill -0 "$admin_pid" 2>/dev/null; then
    break # the wait below reports which stopped
  fi
  curl -fsS "http://$api_addr/readyz" >/dev/null 2>&1 && curl -fsS "http://$admin_addr/healthz" >/dev/null 2>&1 && break
  sleep 0.1
done
if ! kill -0 "$api_pid" 2>/dev/null || ! kill -0 "$admin_pid" 2>/dev/null; then
  set +e
  wait -n "$api_pid" "$admin_pid"
  rc=$?
  echo "a server did not start (exit status $rc); stopping the other" >&2
  exit "$rc"
fi
if kill -0 "$sink_pid" 2>/dev/null; then
  sink_msg="the demo's endpoints send to a sink on this machine, http://127.0.0.1:8082
  (one line per delivery: tail -f $sink_log; the console's Webhooks page shows them)"
else
  sink_msg="the webhook sink did not start (is 127.0.0.1:8082 taken? see $sink_log):
  the demo's deliveries fail and are retried, on this machine"
  sink_pid=""
fi
month=$(date -u +%Y-%m)
cat <<MSG

Tollgate is running: check API http://$api_addr, admin http://$admin_addr
Console: http://$admin_addr/
  operator              $op_email  $op_password
  tenant admin (pro)    $ta_email  $ta_password
  tenant viewer (pro)   $tv_email  $tv_password
  (fresh passwords each run; tenant users see their own tenant only)

Webhooks: $sink_msg

Demo keys (shown once): pro        $pro
                        free       $free
                        enterprise $enterprise
                        prepaid    $prepaid (draws on prepaid credits)

Try a check (the README's first: pro's search rule, 10 a second):

  curl -i http://$api_addr/v1/check \\
    -H 'Authorization: Bearer $token' \\
    -d '{"key": "$pro", "resource": "POST /v1/search"}'

Anonymous (60/hour per IP):

  curl -i http://$api_addr/v1/check -H 'Authorization: Bearer $token' -d '{"ip": "203.0.113.7"}'

The README's examples take the service token from \$SERVICE_TOKEN:

  SERVICE_TOKEN='$token'

Admin API: log in as the demo operator, then issue a key for demo-pro:

  admin_token=\$(curl -s http://$admin_addr/api/v1/login -d '{"email": "$op_email", "password": "$op_password"}' | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
  tenant=\$(curl -s -H "Authorization: Bearer \$admin_token" 'http://$admin_addr/api/v1/tenants?q=demo-pro' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  curl -s -H "Authorization: Bearer \$admin_token" http://$admin_addr/api/v1/tenants/\$tenant/keys -d '{"name": "my key"}'

The CLI in another shell (its settings, the demo's secret key among them,
are in .local/: not printed here):

  eval "\$(make -s env)"
  bin/admin tenants list
  bin/admin report --month $month --tenant demo-pro     # usage applies within about a second

Ctrl-C stops everything, usage flushed first; data stays in .local/.
MSG
set +e
wait -n "$api_pid" "$admin_pid"
rc=$?
echo "a server stopped (exit status $rc); stopping the other"
exit "$rc"
