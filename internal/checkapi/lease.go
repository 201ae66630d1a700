package checkapi

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
)

// leaseRequest is the JSON body of POST /v1/renew and /v1/release.
type leaseRequest struct {
	LeaseID string `json:"lease_id"`
}

// Validate checks the field and names it when invalid.
func (l *leaseRequest) Validate() error {
	if l.LeaseID == "" {
		return tollgate.Invalid(map[string]string{"lease_id": "is required"})
	}
	return nil
}

// HandleRenew serves POST /v1/renew: the heartbeat of a request in flight
// under a concurrency rule. One store call, no Postgres; a lease unknown,
// released or expired is a 404 (its slot may be taken).
func HandleRenew(checker *enforce.Checker, regions *regionForwarder, log *slog.Logger) http.Handler {
	return handleLease(checker, checker.RenewLease, regions, log)
}

// HandleRelease serves POST /v1/release: the end of a request in flight.
// One store call, no Postgres; releasing again answers released false.
func HandleRelease(checker *enforce.Checker, regions *regionForwarder, log *slog.Logger) http.Handler {
	return handleLease(checker, checker.ReleaseLease, regions, log)
}

// handleLease serves op on the lease the body names, or forwards the
// call to the region that keeps the lease.
func handleLease(checker *enforce.Checker, op func(ctx context.Context, id string) (enforce.Lease, error), regions *regionForwarder, log *slog.Logger) http.Handler {
	return handleHeld(checker, regions, log, func(req *leaseRequest) string { return req.LeaseID },
		func(ctx context.Context, req *leaseRequest) (any, error) { return op(ctx, req.LeaseID) })
}
