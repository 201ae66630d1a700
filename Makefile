# Tollgate: `make run` brings the whole system up locally; `make test` runs
# every test against throwaway Postgres, Redis and Redis Cluster servers.
SHELL := /bin/bash
GO ?= go
BIN := bin

.PHONY: run test build bench bench-console loadgen vet fmt clean

build:
	$(GO) build -o $(BIN)/api ./cmd/api
	$(GO) build -o $(BIN)/admin ./cmd/admin
	$(GO) build -o $(BIN)/loadgen ./cmd/loadgen

# Local Postgres and Redis in .local/, migrated and seeded; api on :8080,
# admin on :8081. Ctrl-C stops everything.
run: build
	@scripts/services.sh run -- scripts/run-local.sh

test:
	@TOLLGATE_PG_FSYNC=off scripts/services.sh test -- $(GO) test -count=1 -timeout 20m ./...

# Benchmarks of one check through the handler against real Redis.
bench:
	@TOLLGATE_PG_FSYNC=off scripts/services.sh test -- $(GO) test -run '^$$' -bench . -benchmem ./internal/enforce/...

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
