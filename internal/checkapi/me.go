package checkapi

import (
	"errors"
	"log/slog"
	"net/http"
	"strconv"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/limiter"
)

// MePath is the endpoint where an API key's holder reads its own limits.
const MePath = "/v1/me"

// MeLooksPerMinute and MeBurst bound GET /v1/me per key on each node,
// decided in the process's memory so that a key over them costs Redis
// nothing: a dashboard polling every few seconds fits; a loop does not.
const (
	MeLooksPerMinute = 60
	MeBurst          = 10
)

// meRate is the per-key limit of GET /v1/me.
var meRate = limiter.Params{Algorithm: limiter.GCRA, Limit: MeLooksPerMinute, PeriodUS: limiter.MinuteUS, Burst: MeBurst}

// HandleMe serves GET /v1/me: the caller's own API key, in the headers
// the forward-auth endpoint reads it from (cfg.KeyHeaders; never the query
// string), and no service token. It answers the key's tenant and plan and
// every rule of the plan with what it has left now (enforce.Checker.Look:
// one store call that consumes nothing, no Postgres query), with the
// monthly quota when the plan has one. 401 for a missing or unknown key,
// 403 for a revoked or expired one or a suspended tenant, 429 past
// MeLooksPerMinute (MeBurst at once) per key on this node, 503 while the
// snapshot has not loaded or the limiter store does not answer; errors
// are problem+json with X-Tollgate-Reason.
func HandleMe(checker *enforce.Checker, cfg ForwardConfig, log *slog.Logger) http.Handler {
	if len(cfg.KeyHeaders) == 0 {
		cfg.KeyHeaders = DefaultKeyHeaders
	}
	looks := limiter.NewMemoryStore(nil)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := cfg.key(r.Header, "")
		if key == "" {
			writeDenial(w, 0, http.StatusUnauthorized, tollgate.ReasonKeyRequired, "an API key is required")
			return
		}
		who, err := checker.Identify(key)
		var refused *enforce.Refused
		switch {
		case errors.As(err, &refused):
			status, detail := denial(&enforce.Decision{Reason: refused.Reason})
			writeDenial(w, 0, status, refused.Reason, detail)
			return
		case errors.Is(err, enforce.ErrNotReady):
			unavailable(w, "not ready: the snapshot of plans and keys has not loaded yet")
			return
		case err != nil:
			httpx.Error(w, r, log, err)
			return
		}
		out, err := looks.Check(r.Context(), limiter.Batch{Cost: 1, Requests: []limiter.Request{{Key: who.KeyID, Params: meRate}}})
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		if !out.Admitted {
			retryS := (out.Results[0].RetryAfterUS + limiter.SecondUS - 1) / limiter.SecondUS
			w.Header().Set("Retry-After", strconv.FormatInt(retryS, 10))
			writeDenial(w, 0, http.StatusTooManyRequests, tollgate.ReasonRateLimited,
				"at most "+strconv.Itoa(MeLooksPerMinute)+" looks a minute per key")
			return
		}
		st, err := checker.Look(r.Context(), who, cfg.TrustedProxies.ClientIP(r))
		if err != nil {
			if r.Context().Err() != nil {
				return // the caller went away
			}
			log.WarnContext(r.Context(), "GET /v1/me: limiter store unavailable", "err", err)
			unavailable(w, "the limiter store is unavailable; retry shortly")
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		httpx.JSON(w, r, log, http.StatusOK, st)
	})
}

// unavailable answers 503 with Retry-After: 1.
func unavailable(w http.ResponseWriter, detail string) {
	w.Header().Set("Retry-After", "1")
	writeDenial(w, 0, http.StatusServiceUnavailable, tollgate.ReasonUnavailable, detail)
}
