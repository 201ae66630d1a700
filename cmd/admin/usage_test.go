package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/demo"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
	"github.com/tollgate/tollgate/internal/usage"
)

// seededDemo seeds the demo (plans on since September 2026) and applies
// 120,000 allowed units of demo-pro traffic in October 2026.
func seededDemo(t *testing.T) (url string, db *pgxpool.Pool, pro tenants.Tenant, keyID string) {
	t.Helper()
	ctx := context.Background()
	url = testenv.DatabaseURL(t)
	db, err := postgres.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(db.Close)
	if _, err := demo.Seed(ctx, db, audit.CLI, testkeys.SecretKeys(t)); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z'`); err != nil {
		t.Fatal(err)
	}
	ts := tenants.NewStore(db)
	if pro, err = ts.GetByName(ctx, "demo-pro"); err != nil {
		t.Fatal(err)
	}
	keys, err := ts.ListKeys(ctx, pro.ID)
	if err != nil || len(keys) == 0 {
		t.Fatalf("keys: %v", err)
	}
	keyID = keys[0].ID
	minute := time.Date(2026, 10, 15, 9, 30, 0, 0, time.UTC).Unix()
	_, err = usage.NewStore(db, usage.StoreConfig{}).Apply(ctx, metering.Batch{Version: 1, ID: "cli:1", Rows: []metering.Row{{
		Minute: minute, TenantID: pro.ID, KeyID: keyID, Tier: "authenticated", Resource: "GET /repos", Reason: "ok",
		Counts: metering.Counts{Allowed: 120_000, AllowedUnits: 120_000},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return url, db, pro, keyID
}

func adminCLI(t *testing.T, url string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	getenv := func(k string) string {
		if k == "TOLLGATE_DATABASE_URL" {
			return url
		}
		return ""
	}
	err = run(context.Background(), args, getenv, strings.NewReader(""), &out, &errOut, nil)
	return out.String(), errOut.String(), err
}

func TestReportAndCloseCommands(t *testing.T) {
	url, db, pro, keyID := seededDemo(t)

	out, _, err := adminCLI(t, url, "report", "--month", "2026-10", "--tenant", "demo-pro")
	if err != nil {
		t.Fatal(err)
	}
	var st billing.Statement
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		t.Fatalf("report JSON: %v\n%s", err, out)
	}
	// 120,000 units on pro: 100,000 included, 20,000 × 1 overage + 4,900.
	if st.TenantName != "demo-pro" || st.Status != "open" || st.OverageMinor != 20_000 || st.TotalMinor != 24_900 {
		t.Errorf("report: %s status %s overage %d total %d", st.TenantName, st.Status, st.OverageMinor, st.TotalMinor)
	}

	out, stderr, err := adminCLI(t, url, "report", "--month", "2026-10", "--format", "csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if lines[0] != strings.Join(billing.CSVHeader, ",") {
		t.Errorf("CSV header %q", lines[0])
	}
	totals := map[string]string{}
	for _, l := range lines[1:] {
		f := strings.Split(l, ",")
		if f[5] == "total" {
			totals[f[1]] = f[len(f)-1]
		}
	}
	if want := map[string]string{"demo-enterprise": "49900", "demo-free": "0", "demo-pro": "24900", "demo-prepaid": "0"}; len(totals) != 4 ||
		totals["demo-pro"] != want["demo-pro"] || totals["demo-enterprise"] != want["demo-enterprise"] || totals["demo-free"] != "0" {
		t.Errorf("CSV totals %v, want %v", totals, want)
	}
	if strings.Contains(stderr, "tenants") {
		t.Errorf("progress shown with stdout not a terminal: %q", stderr)
	}

	if _, _, err := adminCLI(t, url, "report", "--month", "october"); err == nil {
		t.Error("report --month october: no error")
	}
	current := time.Now().UTC().Format("2006-01")
	if _, _, err := adminCLI(t, url, "close", "--month", current); err == nil || !strings.Contains(err.Error(), "not ended") {
		t.Errorf("closing the current month: %v", err)
	}

	out, _, err = adminCLI(t, url, "close", "--month", "2026-10")
	if err != nil || !strings.Contains(out, "closed 2026-10") || !strings.Contains(out, "statements: 4") {
		t.Fatalf("close: %v\n%s", err, out)
	}
	if !regexp.MustCompile(`statements: 4; total: \d+\.\d\d USD \(\d+ minor units\)`).MatchString(out) {
		t.Errorf("close: the total is not in dollars with its minor units:\n%s", out)
	}
	out, _, err = adminCLI(t, url, "close", "--month", "2026-10")
	if err != nil || !strings.Contains(out, "already closed") || !strings.Contains(out, "nothing changed") {
		t.Errorf("close again: %v\n%s", err, out)
	}

	// Late usage after the close is listed, and the statement stays.
	ctx := context.Background()
	_, err = usage.NewStore(db, usage.StoreConfig{}).Apply(ctx, metering.Batch{Version: 1, ID: "cli:late", Rows: []metering.Row{{
		Minute: time.Date(2026, 10, 31, 23, 59, 0, 0, time.UTC).Unix(), TenantID: pro.ID, KeyID: keyID,
		Tier: "authenticated", Resource: "GET /repos", Reason: "ok", Counts: metering.Counts{Allowed: 9, AllowedUnits: 9},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err = adminCLI(t, url, "close", "--month", "2026-10")
	if err != nil || !strings.Contains(out, "late usage since closing (not billed): 9 decisions") {
		t.Errorf("close with late usage: %v\n%s", err, out)
	}
	out, _, err = adminCLI(t, url, "report", "--month", "2026-10", "--late")
	if err != nil || !strings.Contains(out, `"batch_id": "cli:late"`) {
		t.Errorf("report --late: %v\n%s", err, out)
	}
	out, _, err = adminCLI(t, url, "report", "--month", "2026-10", "--late", "--format", "csv")
	if err != nil || !strings.HasPrefix(out, "batch_id,tenant_id,key_id,resource,minute,recorded_at,allowed,denied,allowed_units,denied_units\n") ||
		!strings.Contains(out, "\ncli:late,"+pro.ID+","+keyID+",GET /repos,2026-10-31T23:59:00Z,") || !strings.HasSuffix(out, ",9,0,9,0\n") {
		t.Errorf("report --late --format csv: %v\n%s", err, out)
	}
	out, _, err = adminCLI(t, url, "report", "--month", "2026-10", "--tenant", pro.ID)
	if err != nil {
		t.Fatal(err)
	}
	st = billing.Statement{}
	_ = json.Unmarshal([]byte(out), &st)
	if st.Status != "closed" || st.TotalMinor != 24_900 || st.Late == nil || st.Late.AllowedUnits != 9 {
		t.Errorf("closed statement: status %s total %d late %+v", st.Status, st.TotalMinor, st.Late)
	}
}

// TestUsageRoutesFollowRoles: operators read every tenant's usage and
// statements and the operator-wide views; a tenant's users read their own
// tenant's only (another tenant is 404, the operator-wide views 403); no
// session is 401.
func TestUsageRoutesFollowRoles(t *testing.T) {
	url, _, pro, _ := seededDemo(t)
	srv := startAdmin(t, url, map[string]string{"TOLLGATE_SERVE_WORKER": "false"})
	ctx := context.Background()
	free, err := tenants.NewStore(srv.DB).GetByName(ctx, "demo-free")
	testenv.Must(t, err)
	operator := sessionFor(t, srv.DB, createUser(t, srv.DB, "ops@usage.example", auth.RoleOperator, ""))
	proViewer := sessionFor(t, srv.DB, createUser(t, srv.DB, "viewer@pro.example", auth.RoleTenantViewer, pro.ID))
	october := "from=2026-10-01T00:00:00Z&to=2026-11-01T00:00:00Z"
	tenantPaths := func(id string) []string {
		return []string{
			"/api/v1/usage/tenants/" + id + "/series?granularity=day&" + october,
			"/api/v1/usage/tenants/" + id + "/top-keys?" + october,
			"/api/v1/usage/tenants/" + id + "/top-resources?" + october,
			"/api/v1/usage/tenants/" + id + "/rejections?" + october,
			"/api/v1/statements/" + id + "/2026-10",
		}
	}
	operatorPaths := []string{
		"/api/v1/usage/totals?" + october,
		"/api/v1/usage/anonymous/top-ips",
		"/api/v1/statements?month=2026-10",
		"/api/v1/statements/late?month=2026-10",
	}
	for _, p := range append(tenantPaths(pro.ID), operatorPaths...) {
		want(t, call(t, "GET", srv.URL+p, "", nil), http.StatusUnauthorized)
		want(t, call(t, "GET", srv.URL+p, operator, nil), http.StatusOK)
	}
	for _, p := range tenantPaths(pro.ID) {
		want(t, call(t, "GET", srv.URL+p, proViewer, nil), http.StatusOK)
	}
	for _, p := range tenantPaths(free.ID) {
		res := call(t, "GET", srv.URL+p, proViewer, nil)
		want(t, res, http.StatusNotFound)
		if strings.Contains(string(res.Body), "demo-free") {
			t.Errorf("GET %s as pro's viewer names the other tenant: %s", p, res.Body)
		}
	}
	for _, p := range operatorPaths {
		want(t, call(t, "GET", srv.URL+p, proViewer, nil), http.StatusForbidden)
	}
	res := call(t, "GET", srv.URL+"/api/v1/statements/"+pro.ID+"/2026-10?format=csv", proViewer, nil)
	want(t, res, http.StatusOK)
	if !strings.Contains(string(res.Body), ",total,,,,,,,,,,,,24900") {
		t.Errorf("CSV statement:\n%s", res.Body)
	}
}

func TestWorkerCommandAppliesTheStream(t *testing.T) {
	workerApplies(t, metering.Batch{Version: 1, ID: "cli-worker:1", Rows: []metering.Row{{
		Minute: time.Now().Unix() / 60 * 60, Tier: "anonymous", Resource: "*", Reason: "ok",
		Counts: metering.Counts{Allowed: 3, AllowedUnits: 3},
	}}})
}

// workerApplies runs `admin worker` on a stream of the test's own until it
// has applied b, published there, and returns the database's URL and a
// pool on it.
func workerApplies(t *testing.T, b metering.Batch) (url string, db *pgxpool.Pool) {
	t.Helper()
	url = testenv.DatabaseURL(t)
	client, prefix := testenv.Redis(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env := map[string]string{"TOLLGATE_DATABASE_URL": url, "TOLLGATE_REDIS_ADDR": testenv.RedisAddr(t), "TOLLGATE_SECRET_KEY": testenv.SecretKey,
		"TOLLGATE_USAGE_STREAM": prefix + "usage", "TOLLGATE_USAGE_CONSUMER": "cli"}
	stop := runWorkerCommand(t, ctx, env)
	testenv.Must(t, metering.NewRedisProducer(client, prefix+"usage").Publish(ctx, b))
	db, err := postgres.Open(context.Background(), url)
	testenv.Must(t, err)
	t.Cleanup(db.Close)
	testenv.WaitFor(t, 30*time.Second, "the worker command applying the batch", func() bool {
		var n int
		err := db.QueryRow(ctx, `SELECT count(*) FROM usage_batches WHERE batch_id = $1`, b.ID).Scan(&n)
		return err == nil && n == 1
	})
	cancel()
	stop()
	return url, db
}

// TestUsageSetAsideListsWhatTheWorkerSetAside: a batch holding a row
// over a row's bound is applied by `admin worker` without that row, and
// `admin usage set-aside` lists the row's record, newest first, as a
// table and as JSON with what was set aside.
func TestUsageSetAsideListsWhatTheWorkerSetAside(t *testing.T) {
	minute := time.Now().Unix() / 60 * 60
	good := metering.Row{Minute: minute, Tier: "anonymous", Resource: "*", Reason: "ok", Counts: metering.Counts{Allowed: 3, AllowedUnits: 3}}
	huge := good
	huge.Reason, huge.Counts = "rate_limited", metering.Counts{Denied: 1_100, DeniedUnits: 1_100_000_000_000}
	b := metering.Batch{Version: 1, ID: "cli-worker:7", Rows: []metering.Row{good, huge}}
	url, db := workerApplies(t, b)
	// An older record, to show the order.
	ctx := context.Background()
	testenv.Must(t, usage.NewStore(db, usage.StoreConfig{}).SetAside(ctx, "1-0", []byte("{not json"), errors.New("usage: decode batch: not JSON")))
	_, err := db.Exec(ctx, `UPDATE usage_bad_batches SET recorded_at = recorded_at - interval '1 hour' WHERE entry_id = '1-0'`)
	testenv.Must(t, err)

	out, _, err := adminCLI(t, url, "usage", "set-aside")
	testenv.Must(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "RECORDED ") || !strings.Contains(lines[1], "/refused") ||
		!strings.Contains(lines[1], "rows[1]: counts above") || !strings.Contains(lines[2], "1-0 ") {
		t.Errorf("admin usage set-aside:\n%s\nwant the refused row, then the older record", out)
	}
	out, _, err = adminCLI(t, url, "usage", "set-aside", "--json", "--payload", "--limit", "1")
	testenv.Must(t, err)
	var list []usage.SetAside
	testenv.Must(t, json.Unmarshal([]byte(out), &list))
	var set metering.Batch
	if len(list) != 1 || json.Unmarshal([]byte(list[0].Payload), &set) != nil || set.ID != b.ID || len(set.Rows) != 1 || set.Rows[0] != huge {
		t.Errorf("admin usage set-aside --json --payload --limit 1:\n%s\nwant the refused row of %s", out, b.ID)
	}
	if _, _, err := adminCLI(t, url, "usage", "set-aside", "--limit", "0"); err == nil || !strings.Contains(err.Error(), "--limit") {
		t.Errorf("--limit 0: %v, want an error naming --limit", err)
	}
}

// runWorkerCommand runs `admin worker` with env until ctx ends; stop
// waits for it to return and fails the test on its error.
func runWorkerCommand(t *testing.T, ctx context.Context, env map[string]string) (stop func()) {
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"worker"}, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard, nil)
	}()
	return func() {
		t.Helper()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("worker: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the worker command did not stop")
		}
	}
}

func TestProgressOnlyOnATerminal(t *testing.T) {
	url, _, _, _ := seededDemo(t)
	// /dev/null is a character device, as a terminal is: it stands in
	// for one here.
	devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Skip(err)
	}
	defer devNull.Close()
	var stderr bytes.Buffer
	getenv := func(k string) string { return map[string]string{"TOLLGATE_DATABASE_URL": url}[k] }
	if err := run(context.Background(), []string{"report", "--month", "2026-10"}, getenv, strings.NewReader(""), devNull, &stderr, nil); err != nil {
		t.Fatal(err)
	}
	if got := stderr.String(); !strings.Contains(got, "\rstatements for 2026-10: 4/4 tenants\n") {
		t.Errorf("progress on stderr: %q", got)
	}
}

// TestClosedMonthWithoutUsageHasAZeroStatement: a month before the
// tenants existed has the same zero statement open and closed, through
// the CLI and the API, and closing it says so plainly.
func TestClosedMonthWithoutUsageHasAZeroStatement(t *testing.T) {
	url := testenv.DatabaseURL(t)
	if _, err := admin(t, url, "seed", "demo"); err != nil {
		t.Fatal(err)
	}
	srv := startAdmin(t, url, nil)
	pro, err := tenants.NewStore(srv.DB).GetByName(context.Background(), "demo-pro")
	testenv.Must(t, err)
	operator := sessionFor(t, srv.DB, createUser(t, srv.DB, "ops@zero.example", auth.RoleOperator, ""))
	const month = "2020-01" // long before the demo was seeded
	statements := func() (cli, api billing.Statement) {
		t.Helper()
		out, _, err := adminCLI(t, url, "report", "--month", month, "--tenant", "demo-pro")
		if err != nil {
			t.Fatalf("report: %v", err)
		}
		if err := json.Unmarshal([]byte(out), &cli); err != nil {
			t.Fatalf("report: %v\n%s", err, out)
		}
		res := call(t, "GET", srv.URL+"/api/v1/statements/"+pro.ID+"/"+month, operator, nil)
		want(t, res, http.StatusOK)
		res.Decode(t, &api)
		return cli, api
	}
	zero := func(what string, st billing.Statement, status string) {
		t.Helper()
		if st.Status != status || st.TenantID != pro.ID || st.Month != month || st.TotalMinor != 0 ||
			st.Usage != (metering.Counts{}) || len(st.Lines) != 0 || len(st.Plans) != 0 {
			t.Errorf("%s: %+v, want a zero %s statement", what, st, status)
		}
	}
	openCLI, openAPI := statements()
	zero("open, CLI", openCLI, "open")
	zero("open, API", openAPI, "open")

	out, _, err := adminCLI(t, url, "close", "--month", month)
	if err != nil || !strings.Contains(out, "statements: 0; total: 0\n") || strings.Contains(out, "map[") {
		t.Errorf("close: %v\n%s", err, out)
	}
	closedCLI, closedAPI := statements()
	zero("closed, CLI", closedCLI, "closed")
	zero("closed, API", closedAPI, "closed")
	if closedAPI.ClosedAt == nil {
		t.Error("the closed statement has no closed_at")
	}
	// Apart from its status, the closed statement is the open one.
	closedAPI.Status, closedAPI.ClosedAt = openAPI.Status, openAPI.ClosedAt
	a, _ := json.Marshal(openAPI)
	b, _ := json.Marshal(closedAPI)
	if !bytes.Equal(a, b) {
		t.Errorf("open and closed zero statements differ:\n%s\n%s", a, b)
	}
	res := call(t, "GET", srv.URL+"/api/v1/statements/"+pro.ID+"/"+month+"?format=csv", operator, nil)
	want(t, res, http.StatusOK)
	if !strings.Contains(string(res.Body), ",total,,,,,,,,,,,,0") {
		t.Errorf("CSV of the zero statement:\n%s", res.Body)
	}
}
