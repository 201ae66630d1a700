package ui

import (
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// overviewPage is the data of the operator's overview.
type overviewPage struct {
	// ChecksPerSecond is the rate over the last five whole minutes.
	ChecksPerSecond  float64
	Hour, Day, Month periodCounts
	PerMinute        chartHTML
	PerHour          chartHTML
	TopTenants       chartHTML
	Tenants          []tenantUsageRow
	DeniedKeys       []deniedKeyRow
	Rules            []countRow
	IPs              usage.TopIPs
	Census           tenants.Census
	Pipeline         pipelineState
}

// periodCounts are a period's checks and its rejection rate.
type periodCounts struct {
	metering.Counts
	Rate float64
}

func countsOf(c metering.Counts) periodCounts {
	p := periodCounts{Counts: c}
	if n := c.Decisions(); n > 0 {
		p.Rate = float64(c.Denied) / float64(n)
	}
	return p
}

type deniedKeyRow struct {
	usage.DeniedKey
	Prefix, Name, TenantName string
}

// pipelineState is how far behind the usage pipeline is.
type pipelineState struct {
	Known bool // false: no Redis to ask
	Err   string
	usage.Lag
	// Oldest is when the oldest batch not applied yet was published.
	Oldest      time.Time
	LastApplied time.Time
}

// Overview serves the operator's overview (GET / for operators): the
// check rate, allowed and rejected checks over the last hour, day and
// month, who uses and who is denied most, and how far behind the usage
// pipeline is. The figures come from the usage tables, a few seconds
// behind the check API.
func (c *Console) Overview() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, err := c.overview(r, c.now().UTC())
		if err != nil {
			c.Error(w, r, err)
			return
		}
		c.render(w, r, http.StatusOK, "overview", "overview", p)
	})
}

func (c *Console) overview(r *http.Request, now time.Time) (overviewPage, error) {
	ctx := r.Context()
	var p overviewPage
	minute := now.Truncate(time.Minute)
	hour := usage.Range{From: minute.Add(-time.Hour), To: minute}
	// The day ends with the hour under way, in whole hours (the hour
	// rollups); the month is the month rollup, which holds it so far; who
	// uses and who is denied most is read from the day rollups of
	// yesterday and today (UTC).
	day := usage.Range{From: now.Truncate(time.Hour).Add(-23 * time.Hour), To: hourEnd(now)}
	recent := usage.Range{From: dayEnd(now).Add(-48 * time.Hour), To: dayEnd(now)}
	var (
		last5, month       metering.Counts
		perMinute, perHour []usage.Point
		top                []usage.TenantTotal
		denied             []usage.DeniedKey
		rules              []usage.RuleDenials
	)
	// The reads are independent: run them at once, each on its own
	// connection, so that the page takes as long as the slowest.
	err := gather(
		func() (err error) {
			last5, err = c.usage.Overall(ctx, usage.Range{From: minute.Add(-5 * time.Minute), To: minute})
			return err
		},
		func() (err error) {
			perMinute, err = c.usage.OverallSeries(ctx, usage.GranularityMinute, hour)
			return err
		},
		func() (err error) {
			perHour, err = c.usage.OverallSeries(ctx, usage.GranularityHour, day)
			return err
		},
		func() (err error) { month, err = c.usage.Overall(ctx, monthRange(usage.MonthOf(now))); return err },
		func() (err error) { top, err = c.usage.TopTenants(ctx, recent, 8); return err },
		func() (err error) { denied, err = c.usage.TopDeniedKeys(ctx, recent, 8); return err },
		func() (err error) { rules, err = c.usage.TopDenyingRules(ctx, recent, 8); return err },
		func() (err error) { p.IPs, err = c.usage.TopIPs(ctx, day, 8); return err },
		func() (err error) { p.Census, err = c.tenants.Count(ctx, now, now.Add(-24*time.Hour)); return err },
		func() error { p.Pipeline = c.pipeline(r, now); return nil },
	)
	if err != nil {
		return p, err
	}
	p.ChecksPerSecond = float64(last5.Decisions()) / 300
	p.Hour, p.Day, p.Month = countsOf(sum(perMinute)), countsOf(sum(perHour)), countsOf(month)
	p.PerMinute = usageChart("overview-minutes", "Checks per minute, last hour", perMinute, usage.GranularityMinute, narrow)
	p.PerHour = usageChart("overview-hours", "Checks per hour, last 24 hours", perHour, usage.GranularityHour, narrow)

	var tenantIDs, keyIDs []string
	for _, t := range top {
		tenantIDs = append(tenantIDs, t.TenantID)
	}
	for _, k := range denied {
		tenantIDs, keyIDs = append(tenantIDs, k.TenantID), append(keyIDs, k.KeyID)
	}
	var names map[string]string
	var keys map[string]tenants.Key
	if err := gather(
		func() (err error) { names, err = c.tenants.Names(ctx, tenantIDs); return err },
		func() (err error) { keys, err = c.tenants.KeysByID(ctx, keyIDs); return err },
	); err != nil {
		return p, err
	}
	var bars []bar
	for _, t := range top {
		p.Tenants = append(p.Tenants, tenantUsageRow{TenantTotal: t, Name: names[t.TenantID]})
		bars = append(bars, bar{Label: names[t.TenantID], Allowed: t.Allowed, Denied: t.Denied})
	}
	p.TopTenants = barsChart("overview-tenants", "Checks by tenant, yesterday and today (UTC)", "tenant", bars)
	for _, k := range denied {
		p.DeniedKeys = append(p.DeniedKeys, deniedKeyRow{DeniedKey: k, Prefix: keys[k.KeyID].Prefix,
			Name: keys[k.KeyID].Name, TenantName: names[k.TenantID]})
	}
	for _, rd := range rules {
		name := rd.Rule
		if name == "" {
			name = "before any rule (key, tenant)"
		}
		p.Rules = append(p.Rules, countRow{Name: name, Count: rd.Denied})
	}
	return p, nil
}

// gather runs fns at once and returns the first error.
func gather(fns ...func() error) error {
	errs := make([]error, len(fns))
	var wg sync.WaitGroup
	for i, fn := range fns {
		wg.Go(func() { errs[i] = fn() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// pipeline reads how far behind the usage worker is (when the server
// has a Redis) and when a batch was last applied. A stream that cannot be
// read is reported on the page, not as an error of the page.
func (c *Console) pipeline(r *http.Request, now time.Time) pipelineState {
	var s pipelineState
	if at, err := c.usage.LastApplied(r.Context()); err == nil {
		s.LastApplied = at
	}
	if c.cfg.UsageLag == nil {
		return s
	}
	s.Known = true
	lag, err := c.cfg.UsageLag(r.Context())
	if err != nil {
		c.log.WarnContext(r.Context(), "console: usage stream", "err", err)
		s.Err = "the usage stream cannot be read"
		return s
	}
	s.Lag = lag
	s.OldestAge = s.OldestAge.Round(time.Second)
	if lag.Batches > 0 {
		s.Oldest = now.Add(-lag.OldestAge)
	}
	return s
}

// sum adds up a series.
func sum(points []usage.Point) metering.Counts {
	var c metering.Counts
	for _, p := range points {
		c.Add(p.Counts)
	}
	return c
}
