# Tollgate: `make run` brings the whole system up locally; `make test` runs
# every test against throwaway Postgres, Redis and Redis Cluster servers.
SHELL := /bin/bash
GO ?= go
BIN := bin
# VERSION is what --version and tollgate_build_info report, e.g.
# make build VERSION=v1.4.0
VERSION ?= dev
LDFLAGS := -X github.com/tollgate/tollgate/internal/buildinfo.Version=$(VERSION)

.PHONY: run env test test-faults build bench bench-http bench-console loadgen vet fmt clean

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/api ./cmd/api
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/admin ./cmd/admin
	$(GO) build -o $(BIN)/loadgen ./cmd/loadgen
	$(GO) build -o $(BIN)/webhook-sink ./cmd/webhook-sink

# Local Postgres (:15432) and Redis (:16379, append-only) in .local/,
# migrated and seeded; api on :8080, admin on :8081, the demo's webhook
# sink on 127.0.0.1:8082. Ctrl-C stops the api, then admin once the usage
# is applied, then the sink, Redis and Postgres.
run: build
	@scripts/services.sh run -- scripts/run-local.sh

# The export line that points the CLI, and libpq's tools (PGHOST, PGPORT,
# PGUSER, PGDATABASE), at `make run`'s stores, and lets the CLI make
# endpoints on the demo's webhook receiver as `make run` lets its servers:
#   eval "$$(make -s env)"
env:
	@scripts/services.sh env

# TOLLGATE_FAULTS=1 includes the fault suite (test/faults, about a minute
# and a half); plain `go test ./...` skips it.
test:
	@TOLLGATE_FAULTS=1 TOLLGATE_PG_FSYNC=off scripts/services.sh test -- $(GO) test -count=1 -timeout 20m ./...

# Benchmarks of one check through the handler (memory store, Redis, the
# batching Redis store; allowed and denied), and of the circuit breaker.
bench:
	@TOLLGATE_PG_FSYNC=off scripts/services.sh test -- $(GO) test -run '^$$' -bench . -benchmem ./internal/checkapi/ ./internal/enforce/ ./internal/breaker/

# Checks over HTTP with wrk against one api and a no-op floor server:
# checks/s, p50, p99, ratio to the floor, Redis CPU and memory per key
# (scripts/bench-http.sh lists the settings).
bench-http:
	@scripts/bench-http.sh

# Every console page rendered at scale: 10,000 tenants, 100,000 keys, a
# month of minute usage of a busy tenant (docs/benchmarks.md, "Console").
bench-console:
	@TOLLGATE_PG_FSYNC=off scripts/services.sh test -- $(GO) test -run '^$$' -bench Console -benchtime 20x -timeout 30m ./internal/ui/

vet:
	$(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)

# The fault suite alone, with its report (counts, latencies; see
# docs/reliability.md): three api processes, the worker, and a Postgres and
# Redis of its own, under load while each fails in turn.
# TOLLGATE_FAULTS_REPORT=file keeps the report in a file too.
test-faults:
	@TOLLGATE_FAULTS=1 scripts/services.sh test -- $(GO) test -count=1 -v -timeout 10m -run TestFaults ./test/faults/
