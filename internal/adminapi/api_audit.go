package adminapi

import (
	"net/url"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
)

// auditFilter reads the query of GET /audit (newest first): actor (email
// or user ID), action ("key.revoke", or a prefix "key.*"), target ("key"
// or "key:<id>"), tenant (ID) and time (from ≤ at < to, RFC 3339).
func auditFilter(q url.Values) (audit.Filter, error) {
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
}
