package checkapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
)

// settleRequest is the JSON body of POST /v1/settle.
type settleRequest struct {
	HoldID string `json:"hold_id"`
	Cost   *int64 `json:"cost"`
}

// Validate checks the fields and names each invalid one.
func (s *settleRequest) Validate() error {
	f := map[string]string{}
	if s.HoldID == "" {
		f["hold_id"] = "is required"
	}
	switch {
	case s.Cost == nil:
		f["cost"] = "is required: the actual cost, 0 to give the whole estimate back"
	case *s.Cost < 0 || *s.Cost > limiter.MaxSettleCost:
		f["cost"] = "must be an integer from 0 to 2147483648"
	}
	return tollgate.Invalid(f)
}

// HandleSettle serves POST /v1/settle: the actual cost of a hold that a
// check opened. One store call, no Postgres; repeating it answers the
// same, another cost for a settled hold is a 409, an unknown one a 404.
func HandleSettle(checker *enforce.Checker, regions *regionForwarder, log *slog.Logger) http.Handler {
	return handleHeld(checker, regions, log, func(req *settleRequest) string { return req.HoldID },
		func(ctx context.Context, req *settleRequest) (any, error) {
			st, err := checker.Settle(ctx, req.HoldID, *req.Cost)
			if errors.Is(err, enforce.ErrNoHolds) {
				err = tollgate.Errorf(tollgate.EUNAVAILABLE, "this limiter store keeps no holds")
			}
			return st, err
		})
}
