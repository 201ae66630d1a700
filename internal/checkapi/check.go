// Package checkapi is the HTTP face of the check server (cmd/api):
// POST /v1/check, the forward-auth endpoint for gateways (forward.go),
// the health and readiness probes and the metrics, all listed in
// routes.go. Deciding a check is internal/enforce's work; this
// package decodes, authenticates and writes the answer.
package checkapi

import (
	"errors"
	"log/slog"
	"net/http"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/plans"
)

// MaxCheckBody is the largest /v1/check body accepted.
const MaxCheckBody = 16 << 10

// checkRequest is the JSON body of POST /v1/check.
type checkRequest struct {
	Key      *string `json:"key"`
	IP       *string `json:"ip"`
	Resource *string `json:"resource"`
	Cost     *int64  `json:"cost"`
	DryRun   bool    `json:"dry_run"`
	// Hold makes cost an estimate, settled later (POST /v1/settle);
	// HoldTTLS is how long the hold stays open unsettled.
	Hold     bool  `json:"hold"`
	HoldTTLS int64 `json:"hold_ttl_s"`
	// AutoHold opens a hold when a matching rule asks for one; with it,
	// HoldTTLS is the TTL of that hold, if one is opened.
	AutoHold bool `json:"auto_hold"`
}

// maxCost bounds one check's cost; larger values are surely mistakes.
const maxCost = 1_000_000_000

// Validate checks the fields and names each invalid one.
func (c *checkRequest) Validate() error {
	f := map[string]string{}
	if c.Key != nil && *c.Key == "" {
		f["key"] = "must not be empty; omit it for anonymous callers"
	}
	if c.IP != nil {
		if ip, ok := enforce.NormalizeIP(*c.IP); ok {
			*c.IP = ip
		} else {
			f["ip"] = "must be an IPv4 or IPv6 address"
		}
	}
	if c.Key == nil && c.IP == nil {
		f["ip"] = "is required when key is absent"
	}
	if c.Resource != nil {
		switch {
		case len(*c.Resource) == 0 || len(*c.Resource) > 1024:
			f["resource"] = "must be 1–1024 characters"
		case !printable(*c.Resource):
			f["resource"] = "must be valid UTF-8 without control characters"
		}
	}
	if c.Cost != nil && (*c.Cost < 0 || *c.Cost > maxCost) {
		f["cost"] = "must be an integer from 0 to 1000000000"
	}
	if c.HoldTTLS != 0 && (!c.Hold && !c.AutoHold || c.HoldTTLS < 1 || c.HoldTTLS > plans.MaxHoldTTLS) {
		f["hold_ttl_s"] = "must be from 1 to 86400, with hold or auto_hold"
	}
	if c.Hold && c.DryRun {
		f["hold"] = "cannot be combined with dry_run"
	}
	return tollgate.Invalid(f)
}

// printable reports whether s is valid UTF-8 without control characters
// (which no resource name needs, and which the usage store cannot keep).
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return false
		}
	}
	return true
}

func (c *checkRequest) toRequest() enforce.Request {
	r := enforce.Request{Resource: "*", Cost: 1, DryRun: c.DryRun, Hold: c.Hold, HoldTTLS: c.HoldTTLS, AutoHold: c.AutoHold}
	if c.Key != nil {
		r.Key = *c.Key
	}
	if c.IP != nil {
		r.IP = *c.IP
	}
	if c.Resource != nil {
		r.Resource = *c.Resource
	}
	if c.Cost != nil {
		r.Cost = *c.Cost
	}
	return r
}

// HandleCheck serves POST /v1/check. The common request is read and the
// answer written without reflection (request.go, response.go), exactly as
// httpx.Decode and httpx.JSON would.
func HandleCheck(checker *enforce.Checker, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		started := time.Now()
		req, err := decodeCheck(r)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		d, err := checker.Check(r.Context(), req)
		if err != nil {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			if errors.Is(err, enforce.ErrNotReady) {
				err = tollgate.Errorf(tollgate.EUNAVAILABLE, "not ready: the snapshot of plans and keys has not loaded yet")
				w.Header().Set("Retry-After", "1")
			}
			httpx.Error(w, r, log, err)
			return
		}
		setHeaders(w.Header(), &d)
		writeDecision(w, &d)
		checker.Observe(time.Since(started))
	})
}

// SetHeaders writes the rate-limit headers of d's governing rule:
// RateLimit-Policy and RateLimit (draft-ietf-httpapi-ratelimit-headers-11),
// GitHub's X-RateLimit-*, and Retry-After on a denial that a wait lifts:
// d.RetryAfterMS in seconds, rounded up. A denial no wait lifts
// (RetryAfterMS -1: a cost above what a rule ever admits, credits
// exhausted) gets none, so that no client or gateway retries it in vain;
// nor does a key's denial. A denial no rule governs (the prepaid
// balance's) gets only Retry-After.
func SetHeaders(h http.Header, d *enforce.Decision) { setHeaders(h, d) }
