#!/usr/bin/env bash
# bench-http.sh: POST /v1/check over HTTP with wrk, against the api and
# against a no-op floor server in the same run, so that figures from a
# shared machine can be read as ratios.
#
# Starts throwaway Postgres and Redis (scripts/services.sh), seeds the demo,
# issues API keys of the pro plan, starts one api and the floor server
# (cmd/loadgen -floor), then for each of $REPEAT rounds (default 3) and
# each scenario runs wrk with scripts/wrk-check.lua against the floor and
# then the api:
#
#   allowed-keys   1000 pro keys, GET /repos: one GCRA rule, all allowed
#   allowed-ips    50 000 fresh anonymous IPs a round: one GCRA rule each
#   denied-ip      one anonymous IP already over its limit: all denied
#   search-2rules  5000 pro keys, POST /v1/search: GCRA + token bucket
#   hold-settle    1000 pro keys, GET /repos: every check holds 2 units and
#                  the next request settles it at 1 (half checks, half
#                  settlements; not in the default SCENARIOS)
#   allowed-credits 1000 keys of demo-prepaid (the pro plan's rules on a
#                  prepaid balance), GET /repos: allowed-keys plus a draw
#                  on the balance in the same script call (not in the
#                  default SCENARIOS; compare it with allowed-keys)
#   lease-release  1000 keys of the demo plan llm, POST /v1/complete: a
#                  concurrency rule (4 in flight per key) and a tokens
#                  rule; every check takes a lease and the next request
#                  releases it (half checks, half releases; not in the
#                  default SCENARIOS)
#
# It prints, per scenario, the medians over the rounds of checks/s, p50,
# p99 and the ratio to the floor, the decisions the api counted, Redis
# CPU (INFO commandstats: time in scripts; INFO cpu: the whole process)
# and script calls per check, and the CPU the api and the floor processes
# took per check; then Redis memory per state key.
#
# Then constant rates: in each of $REPEAT rounds, for each RATES entry
# (default "300:1 1000:64 6000:64": checks/s and connections), cmd/loadgen
# offers allowed-keys checks at that constant rate (an open loop, latency
# from each check's scheduled start) to the floor and then to the api, and
# the medians of p50, p99, the api's p99 over the floor's in the same
# round, script calls, Redis script µs and Redis process CPU per check and
# the api's CPU per check are printed. "300:1" is the lone check: one
# connection, every check in a script call of its own.
#
# Last, the latency of allowed-keys checks offered at a constant rate,
# RATE_FRACTION (default 0.5) of the api's median allowed-keys checks/s,
# against the api and the floor (LATENCY=0 skips it).
#
# Settings: DURATION (10s), CONNECTIONS (64), THREADS (2), REPEAT (3),
# SCENARIOS (the first four; SCENARIOS= skips them: constant rates only),
# RATES (see above; RATES= skips them; run hold-settle and lease-release
# apart from RATES: the holds and leases they leave open expire during
# the constant-rate runs and their settlements count among its script calls),
# PROFILE=1 (an 8 s CPU profile of the api during
# the first run of $PROFILE_SCENARIO, default allowed-keys, written to
# $PROFILE_OUT, default bench-http.pprof), BENCH_PORT (default: a free port; the api listens
# there, the floor on +1, the api's pprof on +2), API_ENV (settings for
# the api only, e.g. API_ENV="GOGC=200 TOLLGATE_STORE=memory"), API_BIN
# (default bin/api: another build of the api, e.g. an older commit's, to
# compare the two on the same machine),
# PRO_QUOTA (e.g. overage: the pro plan's quota_mode, so that its checks
# count the monthly quota on the check path, with 10^9 included units so
# that the count never stops during the run), PRO_THRESHOLDS (the pro
# plan's quota thresholds, e.g. 50%,80%,100%,remaining:1000, or none; the
# demo's when unset). The pair measures what thresholds cost a check:
#   PRO_QUOTA=overage PRO_THRESHOLDS=none  vs  PRO_QUOTA=overage PRO_THRESHOLDS=50%,80%,100%,remaining:1000
# THRESHOLDS_ALT (e.g. 50%,80%,100%,remaining:1000) measures that pair in
# one run: after each scenario's floor run the api runs twice, with the
# pro plan's thresholds set to none and to THRESHOLDS_ALT (the order
# alternates by round), and the second is reported as SCENARIO+thresholds,
# with its checks/s over the first's in the same round (the rounds'
# median); both share the floor run.
#
# ALT_ENV and ALT_REDIS measure another setting against the same run's
# base in the same way: a second api with ALT_ENV's settings added (on
# the port after the pprof one), and/or Redis's CONFIG SET pairs
# ALT_REDIS (BASE_REDIS for the base runs); after each scenario's floor
# run, the base and the alternative run (the order alternating by round),
# and the alternative is reported as SCENARIO+alt, with its checks/s and
# p50 over the base's in the same round. REPLICA=1 starts a replica of the
# Redis first (for TOLLGATE_REDIS_WAIT_REPLICAS). For example:
#   REPLICA=1 ALT_ENV=TOLLGATE_REDIS_WAIT_REPLICAS=1 SCENARIOS="allowed-keys allowed-credits hold-settle" RATES= LATENCY=0
#   BASE_REDIS="appendonly yes appendfsync everysec" ALT_REDIS="appendonly yes appendfsync always" SCENARIOS=... RATES= LATENCY=0
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != "--inner" ]; then
  if ! command -v wrk >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
      echo "bench-http: installing wrk with apt-get" >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
    else
      echo "bench-http: wrk not found; install it (e.g. 'sudo apt-get install wrk')" >&2
      exit 1
    fi
  fi
  make -s build
  TOLLGATE_PG_FSYNC=off exec scripts/services.sh test -- "$0" --inner
fi

DURATION=${DURATION:-10s}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
REPEAT=${REPEAT:-3}
SCENARIOS=${SCENARIOS-allowed-keys allowed-ips denied-ip search-2rules}
port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_ports() { # five consecutive free ports
  local p
  for _ in $(seq 1 100); do
    p=$((20000 + RANDOM % 30000))
    port_free "$p" && port_free $((p + 1)) && port_free $((p + 2)) && port_free $((p + 3)) && port_free $((p + 4)) && { echo "$p"; return; }
  done
  echo "bench-http: no free ports" >&2
  exit 1
}
PORT=${BENCH_PORT:-$(free_ports)}
API=http://127.0.0.1:$PORT
FLOOR=http://127.0.0.1:$((PORT + 1))
DEBUG_ADDR=127.0.0.1:$((PORT + 2))
API_ALT=http://127.0.0.1:$((PORT + 3))
REPLICA_PORT=$((PORT + 4))
WORK=$TOLLGATE_TEST_WORK
REDIS_PORT=${TOLLGATE_TEST_REDIS_ADDR##*:}
rcli() { redis-cli -p "$REDIS_PORT" "$@"; }

export TOLLGATE_DATABASE_URL=$TOLLGATE_TEST_DATABASE_URL TOLLGATE_REDIS_ADDR=$TOLLGATE_TEST_REDIS_ADDR
TOLLGATE_SECRET_KEY=$(bin/admin secrets generate) # a throwaway one, for the throwaway database
export TOLLGATE_SECRET_KEY
bin/admin migrate up >/dev/null
token=$(bin/admin seed demo --json | sed -n 's/.*"service_token": "\([^"]*\)".*/\1/p')
bin/admin keys issue --tenant demo-pro --count 5000 2>/dev/null >"$WORK/keys5000.txt"
head -n 1000 "$WORK/keys5000.txt" >"$WORK/keys1000.txt"
# The prepaid tenant, with a balance no run spends.
bin/admin keys issue --tenant demo-prepaid --count 1000 2>/dev/null >"$WORK/keyscredits.txt"
bin/admin credits grant --tenant demo-prepaid --amount 1000000000000 --cause bench >/dev/null
# Checks draw on a balance once the credits drainer (admin serve's or
# admin worker's, every second) has made its counter from the ledger:
# run it for a moment before the api starts.
bin/admin worker >/dev/null 2>&1 &
drainer=$!
sleep 3
kill -INT $drainer 2>/dev/null || true
wait $drainer 2>/dev/null || true
if [ -n "${PRO_QUOTA:-}" ]; then
  psql -q "$TOLLGATE_DATABASE_URL" -v ON_ERROR_STOP=1 -v mode="$PRO_QUOTA" >/dev/null \
    <<<"UPDATE plans SET quota_mode = :'mode', included_units = 1000000000 WHERE name = 'pro';"
fi
if [ -n "${PRO_THRESHOLDS:-}" ]; then
  t=$PRO_THRESHOLDS
  [ "$t" = none ] && t=
  bin/admin plans quota --plan pro --thresholds "$t" >/dev/null
fi
if [[ " ${SCENARIOS:-} " == *" lease-release "* ]]; then
  bin/admin tenants create --name bench-llm --plan llm >/dev/null
  bin/admin keys issue --tenant bench-llm --count 1000 2>/dev/null >"$WORK/llmkeys1000.txt"
fi

replica=
if [ "${REPLICA:-}" = 1 ]; then
  mkdir -p "$WORK/replica"
  redis-server --bind 127.0.0.1 --port "$REPLICA_PORT" --dir "$WORK/replica" --save "" --daemonize no \
    --logfile "$WORK/replica/redis.log" --replicaof 127.0.0.1 "$REDIS_PORT" &
  replica=$!
  for _ in $(seq 1 100); do
    redis-cli -p "$REPLICA_PORT" info replication 2>/dev/null | grep -q master_link_status:up && break
    sleep 0.1
  done
  redis-cli -p "$REPLICA_PORT" info replication | grep -q master_link_status:up || { echo "bench-http: the replica did not sync" >&2; exit 1; }
fi
[ -n "${BASE_REDIS:-}" ] && rcli config set $BASE_REDIS >/dev/null

# shellcheck disable=SC2086 # API_ENV holds NAME=value words
env TOLLGATE_API_ADDR=127.0.0.1:$PORT TOLLGATE_DEBUG_ADDR=$DEBUG_ADDR TOLLGATE_LOG_LEVEL=warn ${API_ENV:-} "${API_BIN:-bin/api}" &
api=$!
api_alt=
if [ -n "${ALT_ENV:-}" ]; then
  # shellcheck disable=SC2086 # API_ENV and ALT_ENV hold NAME=value words
  env TOLLGATE_API_ADDR=127.0.0.1:$((PORT + 3)) TOLLGATE_LOG_LEVEL=warn ${API_ENV:-} $ALT_ENV "${API_BIN:-bin/api}" &
  api_alt=$!
fi
bin/loadgen -floor 127.0.0.1:$((PORT + 1)) >/dev/null &
floor=$!
trap 'kill $api $api_alt $floor $replica 2>/dev/null; wait $api $api_alt $floor $replica 2>/dev/null' EXIT
ready() {
  kill -0 $api && kill -0 $floor && curl -fs "$API/readyz" >/dev/null && curl -fs -o /dev/null -X POST "$FLOOR/" &&
    { [ -z "$api_alt" ] || curl -fs "$API_ALT/readyz" >/dev/null; }
}
for _ in $(seq 1 100); do ready 2>/dev/null && break; sleep 0.1; done
ready || { echo "bench-http: the api or the floor server did not start" >&2; exit 1; }

# A caller over its limit: the anonymous plan allows 60 an hour.
for _ in $(seq 1 61); do
  curl -fs -o /dev/null -X POST -H "Authorization: Bearer $token" -d '{"ip":"192.0.2.77","resource":"GET /"}' "$API/v1/check"
done

info() { rcli info "$1" | tr -d '\r'; }
field() { sed -n "s/^$1:\(.*\)$/\1/p"; }
# script_stats: "calls usec" summed over EVAL and EVALSHA.
script_stats() {
  info commandstats | awk -F'[:,=]' '/^cmdstat_eval(sha)?:/ { calls += $3; usec += $5 } END { printf "%d %d\n", calls, usec }'
}
redis_cpu_us() { info cpu | awk -F: '/^used_cpu_(sys|user):/ { s += $2 } END { printf "%d\n", s * 1e6 }'; }
CLK_TCK=$(getconf CLK_TCK)
# proc_cpu_us PID: user + system CPU of a process so far, µs.
proc_cpu_us() { awk -v hz="$CLK_TCK" '{ printf "%d\n", ($14 + $15) * 1e6 / hz }' "/proc/$1/stat"; }
# decisions [URL]: "allowed denied" counted by the api (at URL).
decisions() {
  curl -fs "${1:-$API}/metrics" | awk '/^tollgate_checks_total\{decision="allowed"/ { a += $NF } /^tollgate_checks_total\{decision="denied"/ { d += $NF } END { printf "%d %d\n", a, d }'
}

args_for() { # args_for SCENARIO ROUND: wrk script arguments
  case $1 in
  allowed-keys) echo "keys $WORK/keys1000.txt GET_/repos" ;;
  allowed-ips) echo "ips 50000:$(($2 * 50000)) GET_/" ;;
  denied-ip) echo "ip 192.0.2.77 GET_/" ;;
  search-2rules) echo "keys $WORK/keys5000.txt POST_/v1/search" ;;
  hold-settle) echo "holds $WORK/keys1000.txt GET_/repos" ;;
  allowed-credits) echo "keys $WORK/keyscredits.txt GET_/repos" ;;
  lease-release) echo "leases $WORK/llmkeys1000.txt POST_/v1/complete" ;;
  *) echo "unknown scenario $1" >&2; exit 2 ;;
  esac
}

run_wrk() { # run_wrk URL MODE ARG RESOURCE: prints the RESULT line's fields
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s scripts/wrk-check.lua "$1" -- "$token" "$2" "$3" "${4//_/ }" "$THREADS" \
    | sed -n 's/^RESULT //p'
}
get() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$2"; }

# set_thresholds LIST: the pro plan's thresholds (none: none), once the
# api has had the change's notification.
set_thresholds() {
  local t=$1
  [ "$t" = none ] && t=
  bin/admin plans quota --plan pro --thresholds "$t" >/dev/null
  sleep 1
}

results=$WORK/results.txt
: >"$results"
for round in $(seq 1 "$REPEAT"); do
  for sc in $SCENARIOS; do
    read -r mode arg resource <<<"$(args_for "$sc" "$round")"
    fcpu0=$(proc_cpu_us $floor)
    f=$(run_wrk "$FLOOR/v1/check" "$mode" "$arg" "$resource")
    fcpu1=$(proc_cpu_us $floor)
    variants=none
    if [ -n "${THRESHOLDS_ALT:-}" ]; then
      variants="none $THRESHOLDS_ALT"
      [ $((round % 2)) = 0 ] && variants="$THRESHOLDS_ALT none"
    elif [ -n "${ALT_ENV:-}${ALT_REDIS:-}" ]; then
      variants="base alt"
      [ $((round % 2)) = 0 ] && variants="alt base"
    fi
    for variant in $variants; do
      name=$sc target=$API target_pid=$api
      if [ -n "${THRESHOLDS_ALT:-}" ]; then
        set_thresholds "$variant"
        [ "$variant" != none ] && name=$sc+thresholds
      fi
      case $variant in
      base) [ -n "${BASE_REDIS:-}" ] && rcli config set $BASE_REDIS >/dev/null ;;
      alt)
        name=$sc+alt
        [ -n "${ALT_REDIS:-}" ] && rcli config set $ALT_REDIS >/dev/null
        [ -n "$api_alt" ] && target=$API_ALT target_pid=$api_alt
        ;;
      esac
      read -r calls0 usec0 <<<"$(script_stats)"
      cpu0=$(redis_cpu_us)
      acpu0=$(proc_cpu_us $target_pid)
      read -r a0 d0 <<<"$(decisions "$target")"
      keys0=$(rcli dbsize)
      mem0=$(info memory | field used_memory)
      if [ "${PROFILE:-}" = 1 ] && [ "$round" = 1 ] && [ "$sc" = "${PROFILE_SCENARIO:-allowed-keys}" ]; then
        curl -fs -o "${PROFILE_OUT:-bench-http.pprof}" "http://$DEBUG_ADDR/debug/pprof/profile?seconds=8" &
        prof=$!
      fi
      t=$(run_wrk "$target/v1/check" "$mode" "$arg" "$resource")
      [ -n "${prof:-}" ] && { wait "$prof"; prof=; }
      acpu1=$(proc_cpu_us $target_pid)
      read -r calls1 usec1 <<<"$(script_stats)"
      cpu1=$(redis_cpu_us)
      read -r a1 d1 <<<"$(decisions "$target")"
      keys1=$(rcli dbsize)
      mem1=$(info memory | field used_memory)
      checks=$(((a1 - a0) + (d1 - d0)))
      echo "$name round=$round floor_rps=$(get rps "$f") floor_p50=$(get p50_us "$f") floor_p99=$(get p99_us "$f") $t" \
        "allowed=$((a1 - a0)) denied=$((d1 - d0)) checks=$checks script_calls=$((calls1 - calls0)) script_us=$((usec1 - usec0))" \
        "redis_cpu_us=$((cpu1 - cpu0)) api_cpu_us=$((acpu1 - acpu0)) floor_cpu_us=$((fcpu1 - fcpu0)) floor_requests=$(get requests "$f")" \
        "new_keys=$((keys1 - keys0)) new_mem=$((mem1 - mem0))" | tee -a "$results"
    done
  done
done
summary=$SCENARIOS
if [ -n "${THRESHOLDS_ALT:-}" ]; then
  for sc in $SCENARIOS; do summary="$summary $sc+thresholds"; done
elif [ -n "${ALT_ENV:-}${ALT_REDIS:-}" ]; then
  for sc in $SCENARIOS; do summary="$summary $sc+alt"; done
fi

# Redis memory per state key: MEMORY USAGE of every limiter key (up to
# 200 000), averaged by type and name length (key names are binary).
MEMORY_LUA='
local cursor, sums, counts, seen = "0", {}, {}, 0
repeat
  local r = redis.call("SCAN", cursor, "MATCH", ARGV[1], "COUNT", 1000)
  cursor = r[1]
  for _, k in ipairs(r[2]) do
    local kind = redis.call("TYPE", k)["ok"] .. " key of " .. #k .. " bytes"
    sums[kind] = (sums[kind] or 0) + redis.call("MEMORY", "USAGE", k, "SAMPLES", 0)
    counts[kind] = (counts[kind] or 0) + 1
    seen = seen + 1
  end
until cursor == "0" or seen >= 200000
local out = {}
for kind, sum in pairs(sums) do
  out[#out + 1] = string.format("%s: %d B (%d keys)", kind, math.floor(sum / counts[kind] + 0.5), counts[kind])
end
return out'

# AWK_MED starts the awk programs that summarize the rounds: med(a, n) is
# the median of a[1..n].
AWK_MED='
  function med(a, n,   i, j, t) { for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
'
echo
echo "== medians of $REPEAT rounds: $CONNECTIONS connections, $THREADS wrk threads, $DURATION each; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-14s %10s %8s %8s %10s %8s %8s %7s %9s %9s %10s %10s %10s %8s %8s\n' scenario floor/s p50 p99 checks/s p50 p99 ratio allowed% denied% script-µs redis-µs calls/chk api-µs floor-µs
for sc in $summary; do
  grep "^$sc " "$results" | awk -v sc="$sc" "$AWK_MED"'
    { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; frps[n] = v["floor_rps"]; fp50[n] = v["floor_p50"]; fp99[n] = v["floor_p99"]
      rps[n] = v["rps"]; p50[n] = v["p50_us"]; p99[n] = v["p99_us"]; ratio[n] = v["rps"] / v["floor_rps"]
      c = v["checks"] > 0 ? v["checks"] : 1
      al[n] = 100 * v["allowed"] / c; de[n] = 100 * v["denied"] / c
      sus[n] = v["script_us"] / c; rus[n] = v["redis_cpu_us"] / c; calls[n] = v["script_calls"] / c
      acpu[n] = v["api_cpu_us"] / c; fcpu[n] = v["floor_cpu_us"] / (v["floor_requests"] > 0 ? v["floor_requests"] : 1) }
    END { printf "%-14s %10.0f %6.2fms %6.2fms %10.0f %6.2fms %6.2fms %7.2f %9.1f %9.1f %10.2f %10.2f %10.3f %8.1f %8.1f\n", sc,
      med(frps, n), med(fp50, n) / 1000, med(fp99, n) / 1000, med(rps, n), med(p50, n) / 1000, med(p99, n) / 1000,
      med(ratio, n), med(al, n), med(de, n), med(sus, n), med(rus, n), med(calls, n), med(acpu, n), med(fcpu, n) }'
done
echo
echo "script-µs: Redis time in scripts (INFO commandstats) per check; redis-µs: Redis process CPU (INFO cpu) per check;"
echo "calls/chk: script calls per check; api-µs, floor-µs: CPU of the api and the floor process per check (/proc)."
echo "Ratio: api checks/s over floor checks/s in the same round."
if [ -n "${THRESHOLDS_ALT:-}" ]; then
  echo
  echo "== with thresholds $THRESHOLDS_ALT over without, the same round (api checks/s; api CPU per check)"
  for sc in $SCENARIOS; do
    awk -v sc="$sc" "$AWK_MED"'
      { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        if ($1 == sc) { rps[v["round"]] = v["rps"]; cpu[v["round"]] = v["api_cpu_us"] / (v["checks"] > 0 ? v["checks"] : 1) }
        if ($1 == sc "+thresholds") { trps[v["round"]] = v["rps"]; tcpu[v["round"]] = v["api_cpu_us"] / (v["checks"] > 0 ? v["checks"] : 1) } }
      END { for (r in trps) if (r in rps && rps[r] > 0 && cpu[r] > 0) { n++; q[n] = trps[r] / rps[r]; c[n] = tcpu[r] / cpu[r]; all = all sprintf(" %.3f", q[n]) }
        if (n) printf "%-14s checks/s %.3f (rounds:%s), api CPU per check %.3f\n", sc, med(q, n), all, med(c, n) }' "$results"
  done
fi
if [ -n "${ALT_ENV:-}${ALT_REDIS:-}" ] && [ -z "${THRESHOLDS_ALT:-}" ]; then
  echo
  echo "== alternative (${ALT_ENV:-}${ALT_ENV:+ }${ALT_REDIS:+CONFIG SET $ALT_REDIS}) over base (${BASE_REDIS:+CONFIG SET $BASE_REDIS}), the same round"
  for sc in $SCENARIOS; do
    awk -v sc="$sc" "$AWK_MED"'
      { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        if ($1 == sc) { rps[v["round"]] = v["rps"]; p50[v["round"]] = v["p50_us"] }
        if ($1 == sc "+alt") { arps[v["round"]] = v["rps"]; ap50[v["round"]] = v["p50_us"] } }
      END { for (r in arps) if (r in rps && rps[r] > 0 && p50[r] > 0) { n++; q[n] = arps[r] / rps[r]; l[n] = ap50[r] / p50[r]; all = all sprintf(" %.3f", q[n]) }
        if (n) printf "%-16s checks/s %.3f (rounds:%s), p50 %.3f\n", sc, med(q, n), all, med(l, n) }' "$results"
  done
fi
echo
echo "== Redis memory"
ips_line=$(grep '^allowed-ips ' "$results" | head -n 1 || true)
if [ -n "$ips_line" ]; then
  echo "allowed-ips, first round: $(get new_keys "$ips_line") new keys, $(get new_mem "$ips_line") bytes of used_memory:" \
    "$(( $(get new_mem "$ips_line") / ( $(get new_keys "$ips_line") > 0 ? $(get new_keys "$ips_line") : 1 ) )) B per key"
fi
echo "MEMORY USAGE by key type and name length:"
rcli eval "$MEMORY_LUA" 0 "${TOLLGATE_KEY_PREFIX:-tg:}*" | sed 's/^/  /'

# Constant rates: the lone check and the tail below saturation.
RATES=${RATES-300:1 1000:64 6000:64}
if [ -n "$RATES" ]; then
  keys=$(paste -sd, "$WORK/keys1000.txt")
  run_loadgen() { # run_loadgen URL RATE CONNECTIONS: prints the RESULT line's fields
    bin/loadgen -url "$1" -token "$token" -keys "$keys" -resource "GET /repos" -c "$3" -rate "$2" -d "$DURATION" | sed -n 's/^RESULT //p'
  }
  rates=$WORK/rates.txt
  : >"$rates"
  echo
  for round in $(seq 1 "$REPEAT"); do
    for spec in $RATES; do
      rate=${spec%%:*} conns=${spec#*:}
      f=$(run_loadgen "$FLOOR" "$rate" "$conns")
      # Zero the per-command latency percentiles, so that the median
      # script call below is this run's: the mean is the checks' calls
      # plus the api's rare background scripts (hold expiry, credits),
      # which can cost more than a thousand checks at a low rate.
      rcli config resetstat >/dev/null
      read -r calls0 usec0 <<<"$(script_stats)"
      cpu0=$(redis_cpu_us)
      acpu0=$(proc_cpu_us $api)
      t=$(run_loadgen "$API" "$rate" "$conns")
      acpu1=$(proc_cpu_us $api)
      read -r calls1 usec1 <<<"$(script_stats)"
      cpu1=$(redis_cpu_us)
      p50=$(info latencystats | sed -n 's/^latency_percentiles_usec_evalsha:p50=\([0-9.]*\).*/\1/p')
      echo "rate=$rate conns=$conns round=$round floor_p50=$(get p50_us "$f") floor_p99=$(get p99_us "$f") $t" \
        "script_calls=$((calls1 - calls0)) script_us=$((usec1 - usec0)) script_p50_us=${p50:-0} redis_cpu_us=$((cpu1 - cpu0)) api_cpu_us=$((acpu1 - acpu0))" |
        tee -a "$rates"
    done
  done
  echo
  echo "== constant rates, allowed-keys (cmd/loadgen, open loop, latency from each check's scheduled start): medians of $REPEAT rounds, $DURATION each; load $(cut -d' ' -f1-3 /proc/loadavg)"
  printf '%-8s %6s %10s %9s %9s %9s %9s %8s %10s %10s %11s %10s %8s\n' rate conns served/s floor-p50 floor-p99 p50 p99 p99/floor calls/chk script-µs script-p50µs redis-µs api-µs
  for spec in $RATES; do
    rate=${spec%%:*} conns=${spec#*:}
    grep "^rate=$rate conns=$conns " "$rates" | awk -v rate="$rate" -v conns="$conns" "$AWK_MED"'
      { for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
        n++; c = v["requests"] > 0 ? v["requests"] : 1
        rps[n] = v["rps"]; fp50[n] = v["floor_p50"]; fp99[n] = v["floor_p99"]; p50[n] = v["p50_us"]; p99[n] = v["p99_us"]
        rel[n] = v["p99_us"] / (v["floor_p99"] > 0 ? v["floor_p99"] : 1)
        calls[n] = v["script_calls"] / c; sus[n] = v["script_us"] / c; sp50[n] = v["script_p50_us"]
        rus[n] = v["redis_cpu_us"] / c; acpu[n] = v["api_cpu_us"] / c }
      END { printf "%-8s %6s %10.0f %7.2fms %7.2fms %7.2fms %7.2fms %8.2f %10.3f %10.2f %11.2f %10.2f %8.1f\n", rate "/s", conns,
        med(rps, n), med(fp50, n) / 1000, med(fp99, n) / 1000, med(p50, n) / 1000, med(p99, n) / 1000, med(rel, n),
        med(calls, n), med(sus, n), med(sp50, n), med(rus, n), med(acpu, n) }'
  done
  echo
  echo "p99/floor: the api's p99 over the floor's p99 at the same offered rate in the same round. script-p50µs: the median"
  echo "script call's time in Redis (INFO latencystats; at 300:1, a lone check's). script-µs, redis-µs,"
  echo "calls/chk: as above, per check the api answered; api-µs: the api process's CPU per check (the Go load generator's"
  echo "own CPU is not counted, but it shares the cores)."
fi

if [ "${LATENCY:-1}" = 1 ] && grep -q '^allowed-keys ' "$results"; then
  max=$(grep '^allowed-keys ' "$results" | sed 's/.* rps=\([0-9]*\).*/\1/' | sort -n |
    awk '{ v[NR] = $1 } END { print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }')
  rate=$(awk -v m="$max" -v f="${RATE_FRACTION:-0.5}" 'BEGIN { printf "%d", m * f }')
  echo
  echo "== latency at a constant $rate checks/s (${RATE_FRACTION:-0.5} of the median $max), allowed-keys, cmd/loadgen, $DURATION"
  keys=$(paste -sd, "$WORK/keys1000.txt")
  for target in floor api; do
    url=$API
    [ $target = floor ] && url=$FLOOR
    printf '%-6s ' $target
    bin/loadgen -url "$url" -token "$token" -keys "$keys" -c "$CONNECTIONS" -rate "$rate" -d "$DURATION" | tr '\n' ' '
    echo
  done
fi
