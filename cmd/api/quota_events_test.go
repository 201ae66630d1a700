package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/testenv"
)

// crossingReceiver is a webhook receiver that keeps when the first
// quota.threshold.crossed of each tenant and threshold arrived.
type crossingReceiver struct {
	*httptest.Server
	mu      sync.Mutex
	arrived map[string]time.Time // tenant/units → first arrival
	count   map[string]int
}

func newCrossingReceiver(t *testing.T) *crossingReceiver {
	t.Helper()
	rc := &crossingReceiver{arrived: map[string]time.Time{}, count: map[string]int{}}
	rc.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		body, _ := io.ReadAll(r.Body)
		var ev struct {
			Type     string `json:"type"`
			TenantID string `json:"tenant_id"`
			Data     struct {
				ThresholdUnits int64 `json:"threshold_units"`
			} `json:"data"`
		}
		if json.Unmarshal(body, &ev) == nil && ev.Type == quota.EventThresholdCrossed {
			k := fmt.Sprintf("%s/%d", ev.TenantID, ev.Data.ThresholdUnits)
			rc.mu.Lock()
			if _, ok := rc.arrived[k]; !ok {
				rc.arrived[k] = at
			}
			rc.count[k]++
			rc.mu.Unlock()
		}
	}))
	t.Cleanup(rc.Close)
	return rc
}

func (rc *crossingReceiver) arrival(k string) (time.Time, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	at, ok := rc.arrived[k]
	return at, ok
}

// TestCrossingCheckToFirstAttempt measures, through the whole path with
// the default usage flush (1 s) — three api processes, the stream, the
// usage worker, the outbox and a deliverer — the time from the check that
// crosses a threshold to the first attempt of its quota.threshold.crossed
// reaching a receiver: its 99th percentile must be at most a second, so
// the crossing cannot wait for the next flush.
func TestCrossingCheckToFirstAttempt(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	r.env["TOLLGATE_USAGE_FLUSH"] = "1s" // the default
	// 20 thresholds, every 10 units: each check of cost 10 crosses one.
	var ts []quota.Threshold
	for i := range 20 {
		ts = append(ts, quota.Threshold{Units: int64(10 * (i + 1))})
	}
	plan := plans.Plan{Name: "watched", IncludedUnits: 100_000, QuotaMode: plans.QuotaHard}
	type tenant struct{ id, key string }
	var tenants []tenant
	for i := range 5 {
		id, key := quotaTenant(t, r, fmt.Sprintf("watched-%d", i), plan, quota.PlanSettingsInput{Thresholds: ts})
		tenants = append(tenants, tenant{id, key})
	}
	rc := newCrossingReceiver(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	guard := events.Guard{AllowPrivate: true}
	_, err := events.NewOps(r.db, nil, guard).CreateEndpoint(ctx, audit.CLI, "",
		events.EndpointInput{URL: rc.URL, EventTypes: []string{quota.EventThresholdCrossed}})
	testenv.Must(t, err)
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		_ = events.NewDeliverer(events.DelivererConfig{DB: r.db, Guard: guard}).Run(ctx)
	}()
	defer func() { cancel(); <-delivered }()
	apis := addrs([]*api{r.startAPI(t), r.startAPI(t), r.startAPI(t)})
	stop := runWorker(r.worker("w"))
	defer func() { testenv.Must(t, stop()) }()

	client := &http.Client{Timeout: 10 * time.Second}
	var lat []time.Duration
	n := 0
	for step := range 20 {
		for _, tn := range tenants {
			units := int64(10 * (step + 1))
			sent := time.Now()
			d, err := checkReason(client, apis[n%len(apis)], r.token, map[string]any{"key": tn.key, "resource": "GET /x", "cost": 10})
			n++
			if err != nil || !d.Allowed {
				t.Fatalf("the check crossing %d: %+v, %v", units, d, err)
			}
			k := fmt.Sprintf("%s/%d", tn.id, units)
			var at time.Time
			testenv.WaitFor(t, 30*time.Second, "the crossing of "+k+" delivered", func() bool {
				var ok bool
				at, ok = rc.arrival(k)
				return ok
			})
			lat = append(lat, at.Sub(sent))
		}
	}
	slices.Sort(lat)
	p50, p99 := lat[len(lat)/2], lat[len(lat)*99/100]
	t.Logf("crossing check to first attempt over %d crossings: p50 %v, p99 %v, max %v", len(lat), p50, p99, lat[len(lat)-1])
	if p99 > time.Second {
		t.Errorf("p99 from the crossing check to the first attempt %v, want ≤ 1s", p99)
	}
	var fromRollups int
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT count(*) FROM quota_crossings WHERE source <> 'check'`).Scan(&fromRollups))
	if fromRollups != 0 {
		t.Errorf("%d crossings found from the rollups, want all from the checks", fromRollups)
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for k, c := range rc.count {
		if c != 1 {
			t.Errorf("%s delivered %d times, want once", k, c)
		}
	}
}

// TestQuotaExhaustedOnceAcrossThreeAPIs: a hard quota driven past its end
// through three api processes at once emits quota.exhausted once, from
// the checks' own denials, and nothing of a spend cap; a tenant that
// stays within its quota gets none.
func TestQuotaExhaustedOnceAcrossThreeAPIs(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	hard := plans.Plan{Name: "hard", IncludedUnits: 200, QuotaMode: plans.QuotaHard}
	full, fullKey := quotaTenant(t, r, "full", hard, quota.PlanSettingsInput{})
	within, withinKey := quotaTenant(t, r, "within", hard, quota.PlanSettingsInput{})
	apis := r.startFleet(t, 3)
	allowed, denied := r.spend(t, apis.addrs(), fullKey, 1<<40, 400)
	if allowed > 200 || denied["rate_limited"] == 0 || len(denied) != 1 {
		t.Errorf("allowed %d units of 200, denials %v (want rate_limited by the quota only)", allowed, denied)
	}
	if got, denied := r.spend(t, apis.addrs(), withinKey, 150, 400); got < 150 || len(denied) > 0 {
		t.Errorf("within: %d units, denials %v", got, denied)
	}
	apis.settle(t)
	got, n := crossings(t, r, full, "exhausted", quota.EventExhausted)
	if fmt.Sprint(got) != "map[0:1]" || n != 1 {
		t.Errorf("full: exhausted crossings %v and %d %s events, want one", got, n, quota.EventExhausted)
	}
	if _, n := crossings(t, r, full, "spend_cap", quota.EventSpendCapReached); n != 0 {
		t.Errorf("full: %d %s events, want none", n, quota.EventSpendCapReached)
	}
	if got, n := crossings(t, r, within, "exhausted", quota.EventExhausted); len(got) != 0 || n != 0 {
		t.Errorf("within: exhausted crossings %v and %d events, want none", got, n)
	}
	var month, source string
	testenv.Must(t, r.db.QueryRow(context.Background(), `SELECT data->>'month', data->>'source' FROM events
		WHERE tenant_id = $1 AND type = $2`, full, quota.EventExhausted).Scan(&month, &source))
	if month != time.Now().UTC().Format("2006-01") || source != quota.SourceCheck {
		t.Errorf("quota.exhausted data: month %q, source %q", month, source)
	}
}

// TestSpendCapDeniesUntilTheMonthEnds: once the spend cap is reached,
// /v1/check denies with reason spend_cap and retry_after_ms (and
// Retry-After) to the month's end, and forward-auth answers 429 with
// X-Tollgate-Reason: spend_cap (or the gateway's deny status, carrying
// 429), as docs/usage.md says.
func TestSpendCapDeniesUntilTheMonthEnds(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	// 10 included units, then 1 each: a cap of 5 pays for 15 units.
	capMinor := int64(5)
	_, key := quotaTenant(t, r, "capped", plans.Plan{Name: "capped", IncludedUnits: 10, OverageUnitMinor: 1, QuotaMode: plans.QuotaOverage},
		quota.PlanSettingsInput{SpendCapDefaultMinor: &capMinor})
	addr := r.startAPI(t).addr
	client := &http.Client{Timeout: 10 * time.Second}
	for i := range 15 {
		if d, err := checkReason(client, addr, r.token, map[string]any{"key": key, "resource": "GET /x"}); err != nil || !d.Allowed {
			t.Fatalf("check %d of the 15 units the cap pays for: %+v, %v", i+1, d, err)
		}
	}
	// untilMonthEnd is how long the month has to run, in seconds, now.
	untilMonthEnd := func() float64 {
		now := time.Now().UTC()
		return time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC).Sub(now).Seconds()
	}
	near := func(got, want float64) bool { return got > want-5 && got < want+5 }

	var d struct {
		Allowed      bool   `json:"allowed"`
		Reason       string `json:"reason"`
		RetryAfterMS int64  `json:"retry_after_ms"`
	}
	testenv.Must(t, postJSON(client, "http://"+addr+"/v1/check", r.token, map[string]any{"key": key, "resource": "GET /x"}, &d))
	if d.Allowed || d.Reason != "spend_cap" || !near(float64(d.RetryAfterMS)/1000, untilMonthEnd()) {
		t.Errorf("the 16th unit: %+v, want spend_cap with retry_after_ms ≈ %.0f s", d, untilMonthEnd())
	}

	h := gateway(r.token, "203.0.113.9", map[string]string{"X-API-Key": key, "X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/x"})
	fa := forwardAuth(t, "http://"+addr, "GET", "", h)
	retry, err := strconv.ParseFloat(fa.header.Get("Retry-After"), 64)
	if fa.status != http.StatusTooManyRequests || fa.header.Get("X-Tollgate-Reason") != "spend_cap" || err != nil || !near(retry, untilMonthEnd()) {
		t.Errorf("forward-auth: %d reason %q Retry-After %q, want 429 spend_cap and ≈ %.0f s",
			fa.status, fa.header.Get("X-Tollgate-Reason"), fa.header.Get("Retry-After"), untilMonthEnd())
	}
	h["X-Tollgate-Deny-Status"] = "403"
	if fa := forwardAuth(t, "http://"+addr, "GET", "", h); fa.status != http.StatusForbidden || fa.header.Get("X-Tollgate-Status") != "429" ||
		fa.header.Get("X-Tollgate-Reason") != "spend_cap" {
		t.Errorf("forward-auth denying with 403: %d status %q reason %q", fa.status, fa.header.Get("X-Tollgate-Status"), fa.header.Get("X-Tollgate-Reason"))
	}
}

// TestThresholdsWithoutACounterFromTheWorker: thresholds of a plan
// without a monthly quota, which the check path keeps no counter for,
// are crossed once each, found by the usage worker as it applies the
// checks' usage, through three api processes at once; so are those above
// the included units of an overage plan, whose counter counts the whole
// month, found by the check or the rollups, whichever comes first.
func TestThresholdsWithoutACounterFromTheWorker(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	settings := quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Percent: 50}, {Percent: 150}}}
	plain, plainKey := quotaTenant(t, r, "plain", plans.Plan{Name: "plain", IncludedUnits: 200}, settings)
	over, overKey := quotaTenant(t, r, "over", plans.Plan{Name: "over", IncludedUnits: 200, OverageUnitMinor: 1,
		QuotaMode: plans.QuotaOverage}, settings)
	apis := r.startFleet(t, 3)
	for _, key := range []string{plainKey, overKey} {
		if got, denied := r.spend(t, apis.addrs(), key, 320, 1000); got < 320 || len(denied) > 0 {
			t.Fatalf("%d units allowed, denials %v", got, denied)
		}
	}
	apis.settle(t)
	for name, id := range map[string]string{"plain": plain, "over": over} {
		got, n := crossings(t, r, id, "threshold", quota.EventThresholdCrossed)
		if fmt.Sprint(got) != "map[100:1 300:1]" || n != 2 {
			t.Errorf("%s: crossings %v and %d events, want 100 and 300 once each", name, got, n)
		}
	}
	var fromChecks int
	testenv.Must(t, r.db.QueryRow(context.Background(), `SELECT count(*) FROM quota_crossings
		WHERE kind = 'threshold' AND tenant_id = $1 AND source <> 'rollups'`, plain).Scan(&fromChecks))
	if fromChecks != 0 {
		t.Errorf("%d of the crossings without a counter recorded from checks, want all from the rollups", fromChecks)
	}
}
