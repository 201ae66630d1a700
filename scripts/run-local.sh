#!/usr/bin/env bash
# run-local.sh: run by `make run` inside scripts/services.sh with
# TOLLGATE_DATABASE_URL and TOLLGATE_REDIS_ADDR set. Migrates, seeds the
# demo, starts api and admin, prints a working curl example, and waits.
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
"$bin/admin" migrate up
seed=$("$bin/admin" seed demo --json)
# field NAME [N]: the Nth (default first) value of "NAME": "…" in the seed output.
field() { printf '%s' "$seed" | sed -n "s/.*\"$1\": \"\([^\"]*\)\".*/\1/p" | sed -n "${2:-1}p"; }
token=$(field service_token)
pro=$(field pro)
free=$(field free)
# The demo users come in the order operator, tenant_admin, tenant_viewer.
op_email=$(field email 1)
op_password=$(field password 1)
ta_email=$(field email 2)
ta_password=$(field password 2)
tv_email=$(field email 3)
tv_password=$(field password 3)
api_addr=${TOLLGATE_API_ADDR:-127.0.0.1:8080}
admin_addr=${TOLLGATE_ADMIN_ADDR:-127.0.0.1:8081}
export TOLLGATE_API_ADDR=$api_addr TOLLGATE_ADMIN_ADDR=$admin_addr
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait' EXIT
trap 'exit 0' INT TERM
"$bin/api" & pids+=($!)
"$bin/admin" serve & pids+=($!)
for _ in $(seq 1 100); do
  curl -fsS "http://$api_addr/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
cat <<MSG

Tollgate is running: check API http://$api_addr, admin http://$admin_addr

Web console: http://$admin_addr/  — sign in with a demo login (passwords are new each run):

  operator      $op_email  $op_password
  tenant admin  $ta_email  $ta_password   (demo-pro only)
  tenant viewer $tv_email  $tv_password   (demo-pro, read-only)

Demo keys (shown once): pro $pro
                        free $free

Try a check:

  curl -i http://$api_addr/v1/check \\
    -H 'Authorization: Bearer $token' \\
    -H 'Content-Type: application/json' \\
    -d '{"key": "$pro", "resource": "GET /repos"}'

Anonymous (60/hour per IP):

  curl -i http://$api_addr/v1/check -H 'Authorization: Bearer $token' -d '{"ip": "203.0.113.7"}'

Admin API: log in as the demo operator, then issue a key for demo-pro:

  token=\$(curl -s http://$admin_addr/api/v1/login -d '{"email": "$op_email", "password": "$op_password"}' | sed -n 's/.*"token":"\([^"]*\)".*/\1/p')
  tenant=\$(curl -s -H "Authorization: Bearer \$token" 'http://$admin_addr/api/v1/tenants?q=demo-pro' | sed -n 's/.*"id":"\([^"]*\)".*/\1/p')
  curl -s -H "Authorization: Bearer \$token" http://$admin_addr/api/v1/tenants/\$tenant/keys -d '{"name": "my key"}'

Ctrl-C stops everything; data stays in .local/.
MSG
wait -n "${pids[@]}"
