package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
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
	apis := []*api{r.startAPI(t), r.startAPI(t), r.startAPI(t)}
	stop := runWorker(r.worker("w"))
	allowed, denied := r.spend(t, addrs(apis), fullKey, 1<<40, 400)
	if allowed > 200 || denied["rate_limited"] == 0 || len(denied) != 1 {
		t.Errorf("allowed %d units of 200, denials %v (want rate_limited by the quota only)", allowed, denied)
	}
	if got, denied := r.spend(t, addrs(apis), withinKey, 150, 400); got < 150 || len(denied) > 0 {
		t.Errorf("within: %d units, denials %v", got, denied)
	}
	for _, a := range apis {
		testenv.Must(t, a.stop())
	}
	r.waitDrained(t)
	testenv.Must(t, stop())
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
