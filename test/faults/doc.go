// Package faults is Tollgate's fault suite: a test (faults_test.go) that
// builds the real binaries, starts three check APIs, a usage worker, and
// Postgres and Redis of its own, drives checks at a fixed rate, and in
// turn kills Redis, stops Postgres, kills an API node and kills the worker
// between a commit and its acknowledgement, then stops everything with
// SIGTERM. It asserts counts — no answer other than 200, degraded answers
// exactly where the failure modes say, bounded logs and reloads, usage
// equal to what the client saw — and prints the latencies that
// docs/reliability.md records.
//
// It runs with TOLLGATE_FAULTS=1 (make test-faults); otherwise it is
// skipped.
package faults
