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
