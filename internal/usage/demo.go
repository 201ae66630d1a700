package usage

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Demo usage: `admin seed demo` fills the demo tenants' last 30 days with
// made-up usage, so that the console has something to show at once. It is
// deterministic (the same hour of the same tenant always gets the same
// counts) and fills only hours that have no usage yet: running the seed
// again adds the hours since the last run and leaves real usage alone.

// DemoTenant describes a demo tenant's made-up usage.
type DemoTenant struct {
	TenantID string
	// KeyIDs are the keys that make the checks, the first the busiest.
	KeyIDs []string
	// Resources are the resources called, the first the most.
	Resources []string
	// PerHour is the allowed checks an hour at the daily peak, all keys
	// and resources together.
	PerHour int64
	// DenyRule names the rule that denies; DenyRate is the share of
	// checks it denies (more in a few bursty hours).
	DenyRule string
	DenyRate float64
}

// DemoAnonymous are the anonymous addresses of the demo, each making
// about PerHour checks an hour.
type DemoAnonymous struct {
	IPs      []string
	PerHour  int64
	DenyRule string
}

// demoDays is how far back the demo's usage goes.
const demoDays = 30

// demoMinutes is how far back demo usage has minute rows (the overview's
// last hour and checks per second); older hours have hour rows only.
const demoMinutes = 3 * time.Hour

// SeedDemo makes up usage for the demo tenants and anonymous callers in
// the 30 days before now, in the hours that have none, and returns how
// many hours of usage it added. Minute rows cover the last three hours
// only; hour, day and month rollups all of it.
func (s *Store) SeedDemo(ctx context.Context, list []DemoTenant, anon DemoAnonymous, now time.Time) (int, error) {
	now = now.UTC()
	end := now.Truncate(time.Minute)
	start := end.Truncate(time.Hour).Add(-demoDays * 24 * time.Hour)
	minuteFrom := end.Truncate(time.Hour).Add(-demoMinutes + time.Hour)
	if err := s.ensurePartitions(ctx, []time.Time{MonthStart(minuteFrom), MonthStart(end)}, s.minuteCutoff()); err != nil {
		return 0, err
	}
	hours := 0
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		var minutes, hourRows []metering.Row
		var ips []metering.IPRow
		for _, d := range list {
			if !postgres.IsUUID(d.TenantID) || len(d.KeyIDs) == 0 || len(d.Resources) == 0 {
				return tollgate.Errorf(tollgate.EINVALID, "demo tenant %q needs keys and resources", d.TenantID)
			}
			from, err := demoFrom(ctx, tx, d.TenantID, start)
			if err != nil {
				return err
			}
			for h := from; h.Before(end); h = h.Add(time.Hour) {
				hours++
				if h.Before(minuteFrom) {
					hourRows = append(hourRows, demoRows(d, h, time.Hour)...)
					continue
				}
				for m := h; m.Before(h.Add(time.Hour)) && m.Before(end); m = m.Add(time.Minute) {
					minutes = append(minutes, demoRows(d, m, time.Minute)...)
				}
			}
		}
		if len(anon.IPs) > 0 {
			from, err := demoFrom(ctx, tx, NilUUID, start)
			if err != nil {
				return err
			}
			for h := from; h.Before(end); h = h.Add(time.Hour) {
				rows, ipRows := demoAnonymous(anon, h, end, h.Before(minuteFrom))
				if h.Before(minuteFrom) {
					hourRows = append(hourRows, rows...)
				} else {
					minutes = append(minutes, rows...)
				}
				ips = append(ips, ipRows...)
			}
		}
		return writeDemo(ctx, tx, minutes, hourRows, ips)
	})
	return hours, err
}

// demoFrom is the first hour from start on after the tenant's latest
// usage ("" tenant: anonymous usage).
func demoFrom(ctx context.Context, tx pgx.Tx, tenantID string, start time.Time) (time.Time, error) {
	var latest *time.Time
	if err := tx.QueryRow(ctx, `SELECT max(bucket_start) FROM usage_hour WHERE tenant_id = $1 AND bucket_start >= $2`,
		tenantID, start).Scan(&latest); err != nil {
		return start, fmt.Errorf("usage: demo: %w", err)
	}
	if latest == nil {
		return start, nil
	}
	return latest.UTC().Add(time.Hour), nil
}

// demoRand is the random source of one bucket of one series: the same
// bucket always gets the same numbers.
func demoRand(parts ...string) *rand.Rand {
	h := fnv.New64a()
	for _, p := range parts {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return rand.New(rand.NewPCG(h.Sum64(), 2026))
}

// demoShape is a day's traffic shape at t: low at night (UTC), a peak in
// the afternoon, quieter at weekends; 0.1 to 1.
func demoShape(t time.Time) float64 {
	hour := float64(t.Hour()) + float64(t.Minute())/60
	day := 0.55 + 0.45*math.Cos(2*math.Pi*(hour-15)/24)
	if wd := t.Weekday(); wd == time.Saturday || wd == time.Sunday {
		day *= 0.6
	}
	return max(day, 0.1)
}

// demoRound rounds x up or down at random, in proportion to its
// fraction: small buckets (minutes) then add up to what the rate says.
func demoRound(r *rand.Rand, x float64) int64 {
	n := math.Floor(x)
	if r.Float64() < x-n {
		n++
	}
	return int64(n)
}

// demoRows makes up one bucket (an hour or a minute) of a tenant's usage.
func demoRows(d DemoTenant, at time.Time, bucket time.Duration) []metering.Row {
	r := demoRand(d.TenantID, at.Format(time.RFC3339))
	scale := float64(d.PerHour) * float64(bucket) / float64(time.Hour) * demoShape(at)
	burst := r.Float64() < 0.04 // now and then a burst that the rules deny
	var rows []metering.Row
	for ki, key := range d.KeyIDs {
		for ri, res := range d.Resources {
			share := 1 / float64((ki+1)*(ri+1))
			n := demoRound(r, scale*share*(0.7+0.6*r.Float64())/2)
			if n <= 0 {
				continue
			}
			rows = append(rows, metering.Row{Minute: at.Unix(), TenantID: d.TenantID, KeyID: key, Tier: "authenticated",
				Resource: res, Reason: "ok", Counts: metering.Counts{Allowed: n, AllowedUnits: n}})
			rate := d.DenyRate * (0.5 + r.Float64())
			if burst && ki == 0 {
				rate *= 12
			}
			if denied := demoRound(r, float64(n)*rate); denied > 0 && d.DenyRule != "" {
				rows = append(rows, metering.Row{Minute: at.Unix(), TenantID: d.TenantID, KeyID: key, Tier: "authenticated",
					Resource: res, Reason: "rate_limited", DeniedBy: d.DenyRule, Counts: metering.Counts{Denied: denied, DeniedUnits: denied}})
			}
		}
	}
	return rows
}

// demoAnonymous makes up an hour of anonymous usage from hour on (minute
// by minute up to end when not hourly), with its top addresses by minute
// for the last day.
func demoAnonymous(a DemoAnonymous, hour, end time.Time, hourly bool) ([]metering.Row, []metering.IPRow) {
	var rows []metering.Row
	var ips []metering.IPRow
	step, n := time.Minute, 60
	if hourly {
		step, n = time.Hour, 1
	}
	for i := range n {
		at := hour.Add(time.Duration(i) * step)
		if !at.Before(end) {
			break
		}
		var total, denied int64
		for j, ip := range a.IPs {
			r := demoRand("anonymous", ip, at.Format(time.RFC3339))
			c := int64(math.Round(float64(a.PerHour) * float64(step) / float64(time.Hour) * demoShape(at) / float64(j+1) * (0.5 + r.Float64())))
			d := int64(0)
			if j == 0 {
				d = c / 3 // the busiest address runs into its hourly limit
			}
			total, denied = total+c, denied+d
			if end.Sub(at) <= 24*time.Hour && c > 0 {
				ips = append(ips, metering.IPRow{Minute: at.Unix(), IP: ip, Counts: metering.Counts{Allowed: c - d, Denied: d, AllowedUnits: c - d, DeniedUnits: d}})
			}
		}
		if total == 0 {
			continue
		}
		rows = append(rows, metering.Row{Minute: at.Unix(), Tier: "anonymous", Resource: "GET /repos", Reason: "ok",
			Counts: metering.Counts{Allowed: total - denied, AllowedUnits: total - denied}})
		if denied > 0 {
			rows = append(rows, metering.Row{Minute: at.Unix(), Tier: "anonymous", Resource: "GET /repos", Reason: "rate_limited",
				DeniedBy: a.DenyRule, Counts: metering.Counts{Denied: denied, DeniedUnits: denied}})
		}
	}
	return rows, ips
}

// writeDemo stores minute rows (rolled up to hours, days and months, as
// Apply does) and hour rows (rolled up to days and months).
func writeDemo(ctx context.Context, tx pgx.Tx, minutes, hours []metering.Row, ips []metering.IPRow) error {
	minute, hour, day, month := newRollup(), newRollup(), newRollup(), newRollup()
	add := func(r metering.Row, withMinute bool) {
		at := time.Unix(r.Minute, 0).UTC()
		k := dims{tenantID: orNil(r.TenantID), keyID: orNil(r.KeyID), tier: r.Tier, resource: r.Resource,
			reason: r.Reason, deniedBy: r.DeniedBy}
		if withMinute {
			minute.add(at, k, r.Counts)
		}
		hour.add(at.Truncate(time.Hour), k, r.Counts)
		day.add(time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC), k, r.Counts)
		month.add(MonthStart(at), k, r.Counts)
	}
	for _, r := range minutes {
		add(r, true)
	}
	for _, r := range hours {
		add(r, false)
	}
	for _, t := range []struct {
		table string
		r     rollup
	}{{"usage_minute", minute}, {"usage_hour", hour}, {"usage_day", day}, {"usage_month", month}} {
		if err := upsertRollup(ctx, tx, t.table, t.r); err != nil {
			return fmt.Errorf("usage: demo: %w", err)
		}
	}
	if err := upsertTotals(ctx, tx, minute, hour); err != nil {
		return fmt.Errorf("usage: demo: %w", err)
	}
	byIP := map[ipKey]metering.Counts{}
	for _, r := range ips {
		k := ipKey{at: time.Unix(r.Minute, 0).UTC(), ip: r.IP}
		c := byIP[k]
		c.Add(r.Counts)
		byIP[k] = c
	}
	if err := upsertIPs(ctx, tx, byIP); err != nil {
		return fmt.Errorf("usage: demo: %w", err)
	}
	return nil
}
