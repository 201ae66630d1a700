package adminapi

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
)

// handleAuditList serves GET /audit, newest first, filtered by actor
// (email or user ID), action ("key.revoke", or a prefix "key.*"), target
// ("key" or "key:<id>"), tenant (ID) and time (from ≤ at < to, RFC 3339).
func handleAuditList(log *slog.Logger, s *audit.Store) http.Handler {
	return handlePage(log, func(r *http.Request) (audit.Filter, error) {
		q := r.URL.Query()
		problems := map[string]string{}
		f := audit.Filter{
			Actor:    q.Get("actor"),
			Action:   q.Get("action"),
			TenantID: q.Get("tenant"),
			From:     queryTime(q, "from", problems),
			To:       queryTime(q, "to", problems),
		}
		f.TargetType, f.TargetID, _ = strings.Cut(q.Get("target"), ":")
		if err := audit.ValidateFilter(f); err != nil {
			return f, err
		}
		return f, tollgate.Invalid(problems)
	}, s.List)
}
