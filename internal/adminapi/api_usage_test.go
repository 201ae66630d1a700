package adminapi

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/usage"
)

// testAuthorize lets "X-Operator: yes" read everything and "X-Tenant: id"
// read that tenant's data only.
func testAuthorize(r *http.Request, tenantID string) error {
	if r.Header.Get("X-Operator") == "yes" {
		return nil
	}
	if t := r.Header.Get("X-Tenant"); t != "" {
		if tenantID != "" && t == tenantID {
			return nil
		}
		return tollgate.Errorf(tollgate.EFORBIDDEN, "not yours")
	}
	return tollgate.Errorf(tollgate.EUNAUTHORIZED, "log in")
}

func testRoutes(s usageReads) http.Handler {
	mux := chi.NewRouter()
	usageRoutes(mux, s, testAuthorize, slog.New(slog.DiscardHandler))
	return mux
}

type caller struct {
	t       *testing.T
	h       http.Handler
	headers map[string]string
}

func (c caller) get(path string) (int, string, http.Header) {
	c.t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for k, v := range c.headers {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	c.h.ServeHTTP(rec, req)
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body), rec.Header()
}

func (c caller) getJSON(path string, v any) {
	c.t.Helper()
	code, body, _ := c.get(path)
	if code != http.StatusOK {
		c.t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		c.t.Fatalf("GET %s: %v", path, err)
	}
}

func TestUsageHandlers(t *testing.T) {
	s, w, db := newUsageStore(t, "2026-11-22T12:00:00Z")
	d := fixture.SeedDemoPro(t, db)
	for _, b := range d.MonthOfTraffic() {
		_, err := w.Apply(context.Background(), b)
		testenv.Must(t, err)
	}
	pro, free, key1 := d.Pro, d.Free, d.Key1
	_, err := w.Apply(context.Background(), metering.Batch{Version: 1, ID: "ips", IPs: []metering.IPRow{
		{Minute: at(t, "2026-11-20T10:00"), IP: "198.51.100.7", Counts: metering.Counts{Allowed: 60, Denied: 40, AllowedUnits: 60, DeniedUnits: 40}},
		{Minute: at(t, "2026-11-20T10:01"), IP: "198.51.100.7", Counts: metering.Counts{Allowed: 0, Denied: 10, DeniedUnits: 10}},
		{Minute: at(t, "2026-11-20T10:00"), IP: "203.0.113.9", Counts: metering.Counts{Allowed: 5, AllowedUnits: 5}},
		{Minute: at(t, "2026-11-20T10:00"), IP: metering.OtherIP, Counts: metering.Counts{Allowed: 3, AllowedUnits: 3}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := testRoutes(s)
	operator := caller{t, h, map[string]string{"X-Operator": "yes"}}
	tenant := caller{t, h, map[string]string{"X-Tenant": pro.ID}}
	anonymous := caller{t, h, nil}
	base := "/usage/tenants/" + pro.ID

	var series struct {
		Granularity string        `json:"granularity"`
		Points      []usage.Point `json:"points"`
	}
	tenant.getJSON(base+"/series?granularity=hour&from=2026-10-10T00:00:00Z&to=2026-10-11T00:00:00Z", &series)
	if len(series.Points) != 24 || series.Granularity != "hour" {
		t.Fatalf("%d points of %s, want 24 hours", len(series.Points), series.Granularity)
	}
	for _, p := range series.Points {
		if p.AllowedUnits != 180 || p.Allowed != 165 || p.Denied != 15 {
			t.Errorf("hour %s: %+v, want 165 allowed (180 units), 15 denied", p.At, p.Counts)
		}
	}
	tenant.getJSON(base+"/series?granularity=day&from=2026-09-30T00:00:00Z&to=2026-10-02T00:00:00Z", &series)
	if len(series.Points) != 2 || series.Points[0].AllowedUnits != 1000 || series.Points[1].AllowedUnits != 24*180 {
		t.Errorf("days: %+v", series.Points)
	}
	// Minute rows are kept 3 months (August to November here).
	if code, body, _ := tenant.get(base + "/series?granularity=minute&from=2026-07-01T00:00:00Z&to=2026-07-01T01:00:00Z"); code != http.StatusUnprocessableEntity {
		t.Errorf("minutes before retention: %d %s, want 422", code, body)
	}
	if code, _, _ := tenant.get(base + "/series?granularity=week"); code != http.StatusUnprocessableEntity {
		t.Errorf("granularity week: %d, want 422", code)
	}

	var topHour struct {
		Keys []usage.KeyUsage `json:"keys"`
	}
	// 09:00:30–10:59:59 on 10 October widens to 09:00–11:00: two hours.
	tenant.getJSON(base+"/top-keys?from=2026-10-10T09:00:30Z&to=2026-10-10T10:59:59Z", &topHour)
	if len(topHour.Keys) != 2 || topHour.Keys[0].AllowedUnits != 300 {
		t.Errorf("top keys over two hours %+v, want key 1 with 2 × 150 units", topHour.Keys)
	}

	october := "from=2026-10-01T00:00:00Z&to=2026-11-01T00:00:00Z"
	var top struct {
		Keys      []usage.KeyUsage      `json:"keys"`
		Resources []usage.ResourceUsage `json:"resources"`
	}
	tenant.getJSON(base+"/top-keys?"+october, &top)
	if len(top.Keys) != 2 || top.Keys[0].KeyID != key1.ID || top.Keys[0].AllowedUnits != 111_600 {
		t.Errorf("top keys %+v", top.Keys)
	}
	tenant.getJSON(base+"/top-resources?limit=1&"+october, &top)
	if len(top.Resources) != 1 || top.Resources[0].Resource != "GET /repos" {
		t.Errorf("top resources %+v", top.Resources)
	}
	var rej struct {
		Rejections usage.Rejections `json:"rejections"`
	}
	tenant.getJSON(base+"/rejections?"+october, &rej)
	if r := rej.Rejections; r.Denied != 31*24*15 || r.Rate != 15.0/180 || r.ByRule["hourly"] != 31*24*10 || r.ByRule["search"] != 31*24*5 {
		t.Errorf("rejections %+v", r)
	}

	// Operator-wide data and other tenants' data are refused to tenants.
	for _, path := range []string{"/usage/totals", "/usage/anonymous/top-ips", "/statements?month=2026-10",
		"/usage/tenants/" + free.ID + "/series", "/statements/" + free.ID + "/2026-10", "/statements/late?month=2026-10"} {
		if code, body, _ := tenant.get(path); code != http.StatusForbidden {
			t.Errorf("tenant GET %s: %d %s, want 403", path, code, body)
		}
		if code, _, _ := anonymous.get(path); code != http.StatusUnauthorized {
			t.Errorf("anonymous GET %s: %d, want 401", path, code)
		}
	}
	var totals struct {
		Totals usage.Totals `json:"totals"`
	}
	operator.getJSON("/usage/totals?"+october, &totals)
	if tt := totals.Totals; tt.AllowedUnits != 133_920+5208+31*24*3 || tt.ByTier["anonymous"].Allowed != 31*24*3 ||
		len(tt.ByTenant) != 3 || tt.ByTenant[0].TenantName != "demo-pro" {
		t.Errorf("totals %+v", tt)
	}
	var ips struct {
		IPs usage.TopIPs `json:"ips"`
	}
	operator.getJSON("/usage/anonymous/top-ips?limit=1&from=2026-11-20T00:00:00Z&to=2026-11-21T00:00:00Z", &ips)
	if len(ips.IPs.Top) != 1 || ips.IPs.Top[0].IP != "198.51.100.7" || ips.IPs.Top[0].Denied != 50 || ips.IPs.Other.Allowed != 8 {
		t.Errorf("top IPs %+v", ips.IPs)
	}

	var st billing.Statement
	tenant.getJSON("/statements/"+pro.ID+"/2026-10", &st)
	if st.TotalMinor != 38_820 || st.Status != "open" {
		t.Errorf("statement total %d status %s", st.TotalMinor, st.Status)
	}
	code, body, hdr := tenant.get("/statements/" + pro.ID + "/2026-10?format=csv")
	if code != http.StatusOK || !strings.HasPrefix(hdr.Get("Content-Type"), "text/csv") ||
		!strings.HasPrefix(body, strings.Join(billing.CSVHeader, ",")+"\n") || !strings.Contains(body, ",total,,,,,,,,,,,,38820\n") {
		t.Errorf("CSV statement: %d %s\n%s", code, hdr.Get("Content-Type"), body)
	}
	c := caller{t, h, map[string]string{"X-Tenant": pro.ID, "Accept": "text/csv"}}
	if _, body, _ := c.get("/statements/" + pro.ID + "/2026-10"); !strings.Contains(body, ",total,") {
		t.Errorf("Accept: text/csv did not give CSV: %s", body)
	}
	if code, _, _ := tenant.get("/statements/" + pro.ID + "/2026-13"); code != http.StatusUnprocessableEntity {
		t.Errorf("month 2026-13: %d, want 422", code)
	}
	var all struct {
		Statements []billing.Statement `json:"statements"`
	}
	operator.getJSON("/statements?month=2026-10", &all)
	if len(all.Statements) != 2 {
		t.Errorf("%d statements, want 2", len(all.Statements))
	}
	var late struct {
		Late []usage.LateRow `json:"late_usage"`
	}
	operator.getJSON("/statements/late?month=2026-10", &late)
	if len(late.Late) != 0 {
		t.Errorf("late usage in an open month: %+v", late.Late)
	}
}

// The fixtures below build, through the stores' exported API, the month
// of demo traffic that internal/billing's statement tests use.

func newUsageStore(t *testing.T, now string) (usageReads, *usage.Store, *pgxpool.Pool) {
	t.Helper()
	db := testenv.DB(t)
	clock := mustTime(t, now)
	cfg := usage.StoreConfig{Now: func() time.Time { return clock }}
	reads := usageReads{usage: usage.NewReader(db, cfg), statements: billing.NewStore(db, cfg.Now), tenants: tenants.NewStore(db)}
	return reads, usage.NewStore(db, cfg), db
}

// Shorthands for the fixtures of package meteringtest: a time given in
// RFC 3339, and a minute given as 2006-01-02T15:04, in Unix seconds.
var mustTime, at = meteringtest.Time, meteringtest.At
