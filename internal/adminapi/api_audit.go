package adminapi

import (
	"log/slog"
	"net/http"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/page"
)

// handleAuditList serves GET /audit, newest first, filtered by actor
// (email or user ID), action ("key.revoke", or a prefix "key.*"), target
// ("key" or "key:<id>"), tenant (ID) and time (from ≤ at < to, RFC 3339).
func handleAuditList(log *slog.Logger, s *audit.Store) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		pr, err := page.FromQuery(q)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
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
			httpx.Error(w, r, log, err)
			return
		}
		if err := tollgate.Invalid(problems); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		pg, err := s.List(r.Context(), f, pr)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		httpx.JSON(w, http.StatusOK, pg)
	})
}
