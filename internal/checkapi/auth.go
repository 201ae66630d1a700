package checkapi

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
)

type ctxKey int

const serviceTokenKey ctxKey = 0

// ServiceTokenID returns the verified service token's ID from ctx.
func ServiceTokenID(ctx context.Context) string {
	id, _ := ctx.Value(serviceTokenKey).(string)
	return id
}

// RequireServiceToken lets a request through only with a valid, unexpired
// and unrevoked service token in "Authorization: Bearer …".
func RequireServiceToken(tokens *enforce.TokenVerifier, log *slog.Logger) func(http.Handler) http.Handler {
	return serviceToken(tokens, log, func(r *http.Request) (string, bool) {
		return strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	}, nil)
}

// serviceToken is the service-token middleware reading the token with
// find; refused, when not nil, adds to the 401's headers.
func serviceToken(tokens *enforce.TokenVerifier, log *slog.Logger, find func(*http.Request) (string, bool),
	refused func(http.ResponseWriter)) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			token, ok := find(r)
			var id string
			var err error
			if ok {
				id, err = tokens.Verify(token, time.Now())
			}
			if !ok || err != nil {
				if refused != nil {
					refused(w)
				}
				unauthorized(w, r, log)
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), serviceTokenKey, boxedID(id))))
		})
	}
}

// boxedIDs holds each verified token ID as an interface value, made once:
// putting a string in a context otherwise allocates on every request.
// Only IDs of validly signed tokens get here, so it stays small.
var boxedIDs sync.Map

func boxedID(id string) any {
	if v, ok := boxedIDs.Load(id); ok {
		return v
	}
	v, _ := boxedIDs.LoadOrStore(id, any(id))
	return v
}

func unauthorized(w http.ResponseWriter, r *http.Request, log *slog.Logger) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="tollgate-check"`)
	httpx.Error(w, r, log, auth.ErrBadToken)
}
