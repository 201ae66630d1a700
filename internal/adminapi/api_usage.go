package adminapi

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// Authorize decides whether r may read a tenant's usage and statements.
// tenantID "" asks for operator-wide data (every tenant), which only
// operators may read. It refuses with a *tollgate.Error of code
// EUNAUTHORIZED or EFORBIDDEN. The routes use authorizeUsage (access.go);
// tests may pass their own.
type Authorize func(r *http.Request, tenantID string) error

// handleUsageSeries serves a tenant's usage over time:
// ?granularity=minute|hour|day|month (default hour), &from=…&to=… (RFC
// 3339; default the last 24 hours), widened to whole buckets.
func handleUsageSeries(store *usage.Reader, ts *tenants.Store, authorize Authorize, log *slog.Logger) http.Handler {
	type response struct {
		TenantID    string            `json:"tenant_id"`
		Granularity usage.Granularity `json:"granularity"`
		From        time.Time         `json:"from"`
		To          time.Time         `json:"to"`
		Points      []usage.Point     `json:"points"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant, rng, err := rangeRequest(r, store, ts, authorize)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		g := usage.Granularity(r.URL.Query().Get("granularity"))
		if g == "" {
			g = usage.GranularityHour
		}
		points, err := store.Series(r.Context(), tenant, g, rng)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		resp := response{TenantID: tenant, Granularity: g, From: rng.From, To: rng.To, Points: points}
		if len(points) > 0 {
			resp.From, resp.To = points[0].At, g.Next(points[len(points)-1].At)
		}
		httpx.JSON(w, r, log, http.StatusOK, resp)
	})
}

// handleUsageTopKeys serves a tenant's keys with the most allowed units:
// ?from=…&to=…&limit=N (default 10).
func handleUsageTopKeys(store *usage.Reader, ts *tenants.Store, authorize Authorize, log *slog.Logger) http.Handler {
	return handleTop(store, ts, authorize, log, func(r *http.Request, tenant string, rng usage.Range, limit int) (any, error) {
		keys, err := store.TopKeys(r.Context(), tenant, rng, limit)
		return map[string]any{"tenant_id": tenant, "from": rng.From, "to": rng.To, "keys": keys}, err
	})
}

// handleUsageTopResources serves a tenant's resources with the most allowed
// units: ?from=…&to=…&limit=N (default 10).
func handleUsageTopResources(store *usage.Reader, ts *tenants.Store, authorize Authorize, log *slog.Logger) http.Handler {
	return handleTop(store, ts, authorize, log, func(r *http.Request, tenant string, rng usage.Range, limit int) (any, error) {
		res, err := store.TopResources(r.Context(), tenant, rng, limit)
		return map[string]any{"tenant_id": tenant, "from": rng.From, "to": rng.To, "resources": res}, err
	})
}

// handleUsageRejections serves a tenant's rejection rate, with denials by
// reason and by rule: ?from=…&to=….
func handleUsageRejections(store *usage.Reader, ts *tenants.Store, authorize Authorize, log *slog.Logger) http.Handler {
	return handleTop(store, ts, authorize, log, func(r *http.Request, tenant string, rng usage.Range, _ int) (any, error) {
		rej, err := store.Rejections(r.Context(), tenant, rng)
		return map[string]any{"tenant_id": tenant, "from": rng.From, "to": rng.To, "rejections": rej}, err
	})
}

// handleTop serves a read of usage over ?from=…&to=…, of at most
// ?limit=N (default 10) rows, for the path's {tenantID} ("" on
// operator-wide routes, which authorize lets only operators read).
func handleTop(store *usage.Reader, ts *tenants.Store, authorize Authorize, log *slog.Logger,
	query func(r *http.Request, tenant string, rng usage.Range, limit int) (any, error)) http.Handler {
	type top struct {
		tenant string
		rng    usage.Range
		limit  int
	}
	return handlePath(log, http.StatusOK, func(r *http.Request) (top, error) {
		tenant, rng, err := rangeRequest(r, store, ts, authorize)
		if err != nil {
			return top{}, err
		}
		limit, err := parseLimit(r)
		return top{tenant, rng, limit}, err
	}, func(r *http.Request, q top) (any, error) {
		return query(r, q.tenant, q.rng, q.limit)
	})
}

// handleUsageTotals serves operator-wide usage by tenant and by tier:
// ?from=…&to=….
func handleUsageTotals(store *usage.Reader, ts *tenants.Store, authorize Authorize, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, rng, err := rangeRequest(r, store, ts, authorize)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		list, err := ts.List(r.Context())
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		names := make(map[string]string, len(list))
		for _, t := range list {
			names[t.ID] = t.Name
		}
		totals, err := store.Totals(r.Context(), rng, names)
		writeResult(w, r, log, map[string]any{"from": rng.From, "to": rng.To, "totals": totals}, err)
	})
}

// handleUsageTopIPs serves the anonymous addresses with the most decisions
// (operators only): ?from=…&to=…&limit=N.
func handleUsageTopIPs(store *usage.Reader, authorize Authorize, log *slog.Logger) http.Handler {
	return handleTop(store, nil, authorize, log, func(r *http.Request, _ string, rng usage.Range, limit int) (any, error) {
		top, err := store.TopIPs(r.Context(), rng, limit)
		return map[string]any{"from": rng.From, "to": rng.To, "ips": top}, err
	})
}

// handleUsageStatement serves a tenant's statement for a month (path values
// tenant and month, e.g. 2026-10) as JSON, or as CSV with ?format=csv or
// "Accept: text/csv".
func handleUsageStatement(store *billing.Store, authorize Authorize, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := chi.URLParam(r, "tenantID")
		m, csvOut, err := statementRequest(r, authorize, tenant, chi.URLParam(r, "month"))
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		if !postgres.IsUUID(tenant) {
			httpx.Error(w, r, log, tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenant))
			return
		}
		st, err := store.Statement(r.Context(), tenant, m)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		writeStatements(w, r, log, csvOut, "statement-"+tenant+"-"+m.String(), []billing.Statement{st}, st)
	})
}

// handleUsageStatements serves every tenant's statement for ?month=2006-01
// (operators only), as JSON or CSV like HandleStatement.
func handleUsageStatements(store *billing.Store, authorize Authorize, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m, csvOut, err := statementRequest(r, authorize, "", r.URL.Query().Get("month"))
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		list, err := store.Statements(r.Context(), m, nil)
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		writeStatements(w, r, log, csvOut, "statements-"+m.String(), list,
			map[string]any{"month": m.String(), "statements": list})
	})
}

// handleUsageLate lists usage that arrived after ?month= was closed; with
// &tenant=ID only that tenant's (which the tenant may read), otherwise
// every tenant's (operators only).
func handleUsageLate(store *usage.Reader, authorize Authorize, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tenant := r.URL.Query().Get("tenant")
		if err := authorize(r, tenant); err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		m, err := usage.ParseMonth(r.URL.Query().Get("month"))
		if err != nil {
			httpx.Error(w, r, log, err)
			return
		}
		if tenant != "" && !postgres.IsUUID(tenant) {
			httpx.Error(w, r, log, tollgate.Invalid(map[string]string{"tenant": "must be a tenant ID"}))
			return
		}
		late, err := store.Late(r.Context(), m, tenant)
		writeResult(w, r, log, map[string]any{"month": m.String(), "late_usage": late}, err)
	})
}

func writeStatements(w http.ResponseWriter, r *http.Request, log *slog.Logger, csvOut bool, name string,
	list []billing.Statement, jsonBody any) {
	if !csvOut {
		httpx.JSON(w, r, log, http.StatusOK, jsonBody)
		return
	}
	w.Header().Set("Content-Type", "text/csv; charset=utf-8")
	w.Header().Set("Content-Disposition", `attachment; filename="`+name+`.csv"`)
	if err := billing.WriteCSV(w, list); err != nil {
		log.WarnContext(r.Context(), "usage: write CSV", "err", err)
	}
}

// rangeRequest authorizes r to read usage of the path's {tenantID} (""
// on operator-wide routes), which must exist in ts (ENOTFOUND: an
// unknown tenant has no usage to show, not a series of zeros), and
// parses its range (see parseRange).
func rangeRequest(r *http.Request, store *usage.Reader, ts *tenants.Store, authorize Authorize) (tenant string, rng usage.Range, err error) {
	tenant = chi.URLParam(r, "tenantID")
	if err := authorize(r, tenant); err != nil {
		return "", usage.Range{}, err
	}
	if tenant != "" {
		if _, err := ts.Get(r.Context(), tenant); err != nil {
			return "", usage.Range{}, err
		}
	}
	rng, err = parseRange(r, store.Now())
	return tenant, rng, err
}

// statementRequest authorizes r to read tenant's statements ("" for every
// tenant's), then reads the month (such as 2026-10) and whether the answer
// is to be CSV.
func statementRequest(r *http.Request, authorize Authorize, tenant, month string) (usage.Month, bool, error) {
	if err := authorize(r, tenant); err != nil {
		return usage.Month{}, false, err
	}
	m, err := usage.ParseMonth(month)
	if err != nil {
		return usage.Month{}, false, err
	}
	csvOut, err := wantCSV(r)
	return m, csvOut, err
}

func wantCSV(r *http.Request) (bool, error) {
	switch r.URL.Query().Get("format") {
	case "csv":
		return true, nil
	case "json":
		return false, nil
	case "":
		return strings.Contains(r.Header.Get("Accept"), "text/csv"), nil
	}
	return false, tollgate.Invalid(map[string]string{"format": "must be json or csv"})
}

// parseRange reads ?from= and ?to= (RFC 3339); to defaults to now, from
// to 24 hours before to. Both lie within tollgate.MinTime–MaxTime, and to
// is usage.MaxEnd at the latest, so that the range widened to whole
// buckets can be written back.
func parseRange(r *http.Request, now time.Time) (usage.Range, error) {
	f := map[string]string{}
	rng := usage.Range{To: now.UTC()}
	if v := r.URL.Query().Get("to"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			f["to"] = "must be an RFC 3339 time such as 2026-10-01T00:00:00Z"
		}
		rng.To = t.UTC()
	}
	if _, bad := f["to"]; !bad {
		tollgate.CheckTime(f, "to", rng.To)
		if rng.To.After(usage.MaxEnd) {
			f["to"] = "must be 9999-12-01T00:00:00Z or earlier"
		}
	}
	rng.From = rng.To.Add(-24 * time.Hour)
	if v := r.URL.Query().Get("from"); v != "" {
		t, err := time.Parse(time.RFC3339, v)
		if err != nil {
			f["from"] = "must be an RFC 3339 time such as 2026-10-01T00:00:00Z"
		}
		rng.From = t.UTC()
	}
	if _, bad := f["from"]; !bad {
		tollgate.CheckTime(f, "from", rng.From)
	}
	if len(f) == 0 && !rng.From.Before(rng.To) {
		f["from"] = "must be before to"
	}
	return rng, tollgate.Invalid(f)
}

func parseLimit(r *http.Request) (int, error) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 10, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		return 0, tollgate.Invalid(map[string]string{"limit": "must be an integer from 1 to 1000"})
	}
	return n, nil
}
