package ui_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// Scale of BenchmarkConsole (docs/benchmarks.md, "Console").
const (
	benchTenants     = 10_000
	benchKeysPer     = 10 // 100,000 keys
	benchBusyKeys    = 10
	benchBusyMinutes = 30 * 24 * 60 // a month of minutes
)

// BenchmarkConsole renders every page of the console through the admin
// server's handler (session, access checks, queries, templates, charts)
// against a database of 10,000 tenants, 100,000 keys and a month of minute
// usage of one busy tenant (10 keys × 3 resources, with denials), besides
// a day of hourly and a month of daily usage of every tenant. The data is
// made with generate_series, once, before the first page.
//
//	make bench-console
func BenchmarkConsole(b *testing.B) {
	ctx := context.Background()
	db := testenv.DB(b)
	now := time.Now().UTC()
	start := time.Now()
	busy, planID := benchData(b, ctx, db, now)
	b.Logf("data made in %v", time.Since(start).Round(time.Second))

	secret := []byte("bench-secret-0123456789abcdef0123456789")
	handler := adminapi.NewHandler(adminapi.Config{DB: db, Usage: usage.NewReader(db, usage.StoreConfig{}),
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), SessionSecret: secret, SessionTTL: time.Hour})
	as := auth.NewStore(db)
	u, err := as.CreateUser(ctx, auth.NewUser{Email: "ops@example.com", Password: "bench password 1", Role: auth.RoleOperator})
	testenv.Must(b, err)
	token, _, err := as.StartSession(ctx, u, secret, time.Hour, now)
	testenv.Must(b, err)

	month := usage.MonthOf(now).String()
	tenant := "/tenants/" + busy
	for _, p := range []struct{ name, path string }{
		{"overview", "/"},
		{"plans", "/plans"},
		{"plan", fmt.Sprintf("/plans/%d", planID)},
		{"plan-edit", fmt.Sprintf("/plans/%d/edit", planID)},
		{"tenants", "/tenants"},
		{"tenants-search", "/tenants?q=tenant-99"},
		{"tenant", tenant},
		{"tenant-keys", tenant + "/keys"},
		{"keys", "/keys"},
		{"keys-by-prefix", "/keys?prefix=tg_ab"},
		{"tenant-usage", tenant + "/usage"},
		{"tenant-usage-key", tenant + "/usage?key=" + benchKeyID(0)},
		{"statements", tenant + "/statements"},
		{"statement", tenant + "/statements/" + month},
		{"usage", "/usage"},
		{"service-tokens", "/service-tokens"},
		{"users", "/users"},
		{"audit", "/audit"},
		{"webhooks", "/webhooks"},
		{"webhook", "/webhooks/" + benchEndpoint},
		{"alerts", tenant + "/alerts"},
	} {
		b.Run(p.name, func(b *testing.B) {
			for b.Loop() {
				req := httptest.NewRequest(http.MethodGet, p.path, nil)
				req.AddCookie(&http.Cookie{Name: adminapi.SessionCookie, Value: token})
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, req)
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s = %d\n%s", p.path, rec.Code, rec.Body)
				}
			}
		})
	}
}

// benchEndpoint is the busy tenant's webhook endpoint, with a delivery of
// each of its events, three attempts each.
const benchEndpoint = "00000000-0000-4000-a000-000000000001"

// benchKeyID is the ID of the busy tenant's key i.
func benchKeyID(i int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", i+1) }

// benchData makes the benchmark's data and returns the busy tenant's ID
// and its plan's.
func benchData(b *testing.B, ctx context.Context, db *pgxpool.Pool, now time.Time) (string, int64) {
	b.Helper()
	ps := plans.NewStore(db)
	var planID int64
	for _, p := range plans.DemoPlans() {
		stored, err := ps.Put(ctx, p)
		testenv.Must(b, err)
		if p.Name == "pro" {
			planID = stored.ID
		}
	}
	// Minute partitions for this month and the one before.
	for _, at := range []time.Time{now.AddDate(0, 0, -31), now} {
		_, err := usage.NewStore(db, usage.StoreConfig{Now: func() time.Time { return at }}).Maintain(ctx)
		testenv.Must(b, err)
	}
	busy := "00000000-0000-4000-9000-000000000001"
	minute := now.Truncate(time.Minute)
	steps := []struct {
		what string
		sql  string
		args []any
	}{
		{"tenants", `INSERT INTO tenants (id, name, plan_id, created_at)
			SELECT CASE WHEN g = 1 THEN $3::uuid ELSE gen_random_uuid() END, 'tenant-' || g, $1, $2
			FROM generate_series(1, $4) g`, []any{planID, now.AddDate(0, -2, 0), busy, benchTenants}},
		{"plan history", `INSERT INTO tenant_plan_changes (tenant_id, plan_id, effective_at)
			SELECT id, plan_id, created_at FROM tenants`, nil},
		{"keys", `INSERT INTO api_keys (id, tenant_id, name, hash, prefix, created_at, last_used_at)
			SELECT CASE WHEN t.name = 'tenant-1' THEN ('00000000-0000-4000-8000-' || lpad(k::text, 12, '0'))::uuid
				ELSE gen_random_uuid() END,
				t.id, 'key ' || k, sha256(convert_to(t.id::text || k, 'UTF8')),
				'tg_' || substr(md5(t.id::text || k), 1, 8), $1::timestamptz - (k || ' days')::interval,
				CASE WHEN k % 3 = 0 THEN $1::timestamptz - (k || ' hours')::interval END
			FROM tenants t, generate_series(1, $2) k`, []any{now, benchKeysPer}},
		// The busy tenant: a month of minutes, by key and resource, with
		// denials on its first key.
		{"busy tenant's minutes", `INSERT INTO usage_minute (tenant_id, bucket_start, key_id, tier, resource, reason,
				denied_by, allowed, denied, allowed_units, denied_units)
			SELECT $1::uuid, $2::timestamptz - (m || ' minutes')::interval,
				('00000000-0000-4000-8000-' || lpad(k::text, 12, '0'))::uuid, 'authenticated', r, 'ok', '',
				10 + (m + k) % 7, 0, 10 + (m + k) % 7, 0
			FROM generate_series(1, $3) m, generate_series(1, $4) k,
				unnest(ARRAY['GET /repos', 'POST /v1/search', 'GET /users']) r
			UNION ALL
			SELECT $1::uuid, $2::timestamptz - (m || ' minutes')::interval,
				'00000000-0000-4000-8000-000000000001'::uuid, 'authenticated', 'POST /v1/search', 'rate_limited',
				'search', 0, 1 + m % 3, 0, 1 + m % 3
			FROM generate_series(1, $3) m`, []any{busy, minute, benchBusyMinutes, benchBusyKeys}},
		{"busy tenant's rollups", `INSERT INTO usage_hour SELECT tenant_id, date_trunc('hour', bucket_start), key_id, tier,
				resource, reason, denied_by, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
			FROM usage_minute GROUP BY 1, 2, 3, 4, 5, 6, 7`, nil},
		// Every other tenant: its first key's last day by hour.
		{"other tenants' hours", `INSERT INTO usage_hour SELECT t.id, $1::timestamptz - (h || ' hours')::interval,
				(SELECT id FROM api_keys k WHERE k.tenant_id = t.id ORDER BY name LIMIT 1), 'authenticated', 'GET /repos',
				'ok', '', 100 + h, 0, 100 + h, 0
			FROM tenants t, generate_series(0, 23) h WHERE t.id <> $2::uuid`, []any{minute.Truncate(time.Hour), busy}},
		{"days", `INSERT INTO usage_day SELECT tenant_id, date_trunc('day', bucket_start), key_id, tier, resource, reason,
				denied_by, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
			FROM usage_hour GROUP BY 1, 2, 3, 4, 5, 6, 7`, nil},
		{"months", `INSERT INTO usage_month SELECT tenant_id, date_trunc('month', bucket_start), key_id, tier, resource,
				reason, denied_by, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
			FROM usage_day GROUP BY 1, 2, 3, 4, 5, 6, 7`, nil},
		{"minute totals", `INSERT INTO usage_total_minute SELECT bucket_start, sum(allowed), sum(denied), sum(allowed_units),
				sum(denied_units) FROM usage_minute GROUP BY 1`, nil},
		{"hour totals", `INSERT INTO usage_total_hour SELECT bucket_start, sum(allowed), sum(denied), sum(allowed_units),
				sum(denied_units) FROM usage_hour GROUP BY 1`, nil},
		{"anonymous addresses", `INSERT INTO usage_anon_ip_minute (bucket_start, ip, allowed, denied, allowed_units, denied_units)
			SELECT $1::timestamptz - (m || ' minutes')::interval, '203.0.113.' || ip, 5, ip % 2, 5, ip % 2
			FROM generate_series(1, 1440) m, generate_series(1, 20) ip`, []any{minute}},
		{"audit", `INSERT INTO audit_log (actor, action, target_type, target_id, tenant_id, after)
			SELECT 'cli', 'key.create', 'key', gen_random_uuid()::text, t.id, '{"name": "k"}'
			FROM tenants t`, nil},
		// Webhooks: an endpoint of every tenth tenant's and of the busy
		// one, 50 operators'; the busy tenant's 10,000 events, each
		// delivered to its endpoint at the third attempt.
		{"events", `INSERT INTO events (id, type, tenant_id, created_at, data)
			SELECT 'evt_bench' || lpad(g::text, 22, '0'), 'quota.threshold.crossed', $1::uuid,
				$2::timestamptz - (g || ' minutes')::interval, '{"threshold": {"percent": 80}}'
			FROM generate_series(1, 10000) g`, []any{busy, now}},
		{"webhook endpoints", `INSERT INTO webhook_endpoints (id, owner_tenant_id, url, secret, created_at)
			SELECT CASE WHEN t.id = $1::uuid THEN $3::uuid ELSE gen_random_uuid() END, t.id,
				'https://hooks.example.com/' || t.name, 'whsec_bench', $2::timestamptz
			FROM tenants t WHERE t.name LIKE '%0' OR t.id = $1::uuid
			UNION ALL
			SELECT gen_random_uuid(), NULL, 'https://ops.example.com/' || g, 'whsec_bench', $2::timestamptz FROM generate_series(1, 50) g`,
			[]any{busy, now, benchEndpoint}},
		{"webhook deliveries", `INSERT INTO webhook_deliveries (event_id, endpoint_id, state, attempts, created_at, next_attempt_at, finished_at)
			SELECT e.id, $1::uuid, 'delivered', 3, e.created_at, e.created_at, e.created_at + interval '3 minutes'
			FROM events e`, []any{benchEndpoint}},
		{"webhook attempts", `INSERT INTO webhook_attempts (delivery_id, attempt, at, status, latency_us, response_body)
			SELECT d.id, a, d.created_at + (a || ' minutes')::interval, CASE WHEN a < 3 THEN 503 ELSE 200 END, 1000 * a,
				repeat('response ', 100)
			FROM webhook_deliveries d, generate_series(1, 3) a`, nil},
	}
	for _, s := range steps {
		if _, err := db.Exec(ctx, s.sql, s.args...); err != nil {
			b.Fatalf("bench data: %s: %v", s.what, err)
		}
	}
	if _, err := db.Exec(ctx, `ANALYZE`); err != nil {
		b.Fatal(err)
	}
	return busy, planID
}
