package checkapi

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
)

// RequireServiceToken lets a request through only with a valid, unexpired
// and unrevoked service token in "Authorization: Bearer …" (the scheme in
// any case, as RFC 9110 has it).
func RequireServiceToken(tokens *enforce.TokenVerifier, log *slog.Logger) func(http.Handler) http.Handler {
	return serviceToken(tokens, log, func(r *http.Request) (string, bool) {
		return BearerCredentials(r.Header.Get("Authorization"))
	}, nil)
}

// serviceToken is the service-token middleware reading the token with
// find; refused, when not nil, adds to the 401's headers and reports the
// refusal (sent: whether the request had a token at all).
func serviceToken(tokens *enforce.TokenVerifier, log *slog.Logger, find func(*http.Request) (string, bool),
	refused func(w http.ResponseWriter, r *http.Request, sent bool)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, ok := find(r)
			var err error
			if ok {
				_, err = tokens.Verify(token, time.Now())
			}
			if !ok || err != nil {
				if refused != nil {
					refused(w, r, ok)
				}
				unauthorized(w, r, log)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func unauthorized(w http.ResponseWriter, r *http.Request, log *slog.Logger) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-check"`)
	httpx.Error(w, r, log, auth.ErrBadToken)
}
