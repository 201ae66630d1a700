package main

import (
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate"
	usagepkg "github.com/tollgate/tollgate/internal/usage"
)

// temporaryOperatorGuard is a STOPGAP until the admin API's logins and
// roles exist: it lets a request read usage and statements (of any tenant)
// only with "Authorization: Bearer $TOLLGATE_ADMIN_TOKEN", and refuses
// everything while that variable is unset. Replace it with the real
// authorization, which may also let tenants read their own data.
func temporaryOperatorGuard(getenv func(string) string) usagepkg.Authorize {
	want := strings.TrimSpace(getenv("TOLLGATE_ADMIN_TOKEN"))
	return func(r *http.Request, _ string) error {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if want == "" || !ok || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
			return tollgate.Errorf(tollgate.EUNAUTHORIZED, "operator token required (Authorization: Bearer $TOLLGATE_ADMIN_TOKEN)")
		}
		return nil
	}
}
