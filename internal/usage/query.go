package usage

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Granularity is the bucket size of a time series.
type Granularity string

// Granularities, each served from its own table.
const (
	GranularityMinute Granularity = "minute"
	GranularityHour   Granularity = "hour"
	GranularityDay    Granularity = "day"
	GranularityMonth  Granularity = "month"
)

var granularityTable = map[Granularity]string{
	GranularityMinute: "usage_minute", GranularityHour: "usage_hour",
	GranularityDay: "usage_day", GranularityMonth: "usage_month",
}

// fixedSpans are the lengths of the buckets of fixed length; a month's
// varies. The buckets are in UTC, where every day has 24 hours.
var fixedSpans = map[Granularity]time.Duration{
	GranularityMinute: time.Minute, GranularityHour: time.Hour, GranularityDay: 24 * time.Hour,
}

// floor returns the start of the bucket t falls in.
func (g Granularity) floor(t time.Time) time.Time {
	t = t.UTC()
	if span, ok := fixedSpans[g]; ok {
		return t.Truncate(span) // the zero time is a UTC midnight
	}
	return MonthStart(t)
}

// Next returns the start of the bucket after the one starting at t.
func (g Granularity) Next(t time.Time) time.Time {
	if span, ok := fixedSpans[g]; ok {
		return t.Add(span)
	}
	return t.AddDate(0, 1, 0)
}

// Range is a time range [From, To). Queries widen it to whole buckets.
type Range struct {
	From, To time.Time
}

// maxPoints bounds a series' length.
const maxPoints = 10_000

// coarsest returns the coarsest granularity whose buckets r's ends fall
// on, after widening r to whole minutes: the cheapest table that answers
// exactly.
func (r Range) coarsest() (Granularity, Range) {
	to := GranularityMinute.floor(r.To)
	if !to.Equal(r.To) {
		to = GranularityMinute.Next(to)
	}
	r = Range{GranularityMinute.floor(r.From), to}
	for _, g := range []Granularity{GranularityMonth, GranularityDay, GranularityHour} {
		if g.floor(r.From).Equal(r.From) && g.floor(r.To).Equal(r.To) {
			return g, r
		}
	}
	return GranularityMinute, r
}

func (s *Reader) checkRange(g Granularity, r Range) error {
	if !r.From.Before(r.To) {
		return tollgate.Invalid(map[string]string{"from": "must be before to"})
	}
	if g == GranularityMinute && r.From.Before(s.minuteCutoff()) {
		return tollgate.Invalid(map[string]string{"from": fmt.Sprintf(
			"minute data is kept for %d months; use whole hours, days or months for older ranges", s.cfg.MinuteRetention)})
	}
	return nil
}

// Point is one bucket of a series.
type Point struct {
	At time.Time `json:"at"`
	metering.Counts
}

// Series returns the tenant's counts per bucket of g over r (widened to
// whole buckets), one point per bucket, zeros included. At most 10,000
// points (EINVALID beyond).
func (s *Reader) Series(ctx context.Context, tenantID string, g Granularity, r Range) ([]Point, error) {
	return s.SeriesOf(ctx, tenantID, Dimensions{}, g, r)
}

// Dimensions narrow a series to one key or one resource; zero fields
// match everything.
type Dimensions struct {
	// KeyID is a key's ID; NoKey for decisions without a key.
	KeyID    string
	Resource string
}

// NoKey is the KeyID of Dimensions that selects decisions without a key.
const NoKey = nilUUID

// SeriesOf is Series narrowed to d.
func (s *Reader) SeriesOf(ctx context.Context, tenantID string, d Dimensions, g Granularity, r Range) ([]Point, error) {
	if !postgres.IsUUID(tenantID) || (d.KeyID != "" && !postgres.IsUUID(d.KeyID)) {
		points, _, _, err := s.buckets(g, r) // no usage can match
		return points, err
	}
	return s.series(ctx, g, r, tenantID, d)
}

// buckets returns r's buckets of g, with zero counts, and the range they
// cover.
func (s *Reader) buckets(g Granularity, r Range) (points []Point, from, to time.Time, err error) {
	if _, ok := granularityTable[g]; !ok {
		return nil, from, to, tollgate.Invalid(map[string]string{"granularity": "must be minute, hour, day or month"})
	}
	from, to = g.floor(r.From), g.floor(r.To)
	if !to.Equal(r.To.UTC()) {
		to = g.Next(to)
	}
	if err := s.checkRange(g, Range{from, to}); err != nil {
		return nil, from, to, err
	}
	for t := from; t.Before(to); t = g.Next(t) {
		if len(points) == maxPoints {
			return nil, from, to, tollgate.Invalid(map[string]string{"from": fmt.Sprintf("the range holds more than %d %ss", maxPoints, g)})
		}
		points = append(points, Point{At: t})
	}
	return points, from, to, nil
}

// series returns the counts per bucket of the tenant's decisions ("" for
// every tenant's) matching d.
func (s *Reader) series(ctx context.Context, g Granularity, r Range, tenantID string, d Dimensions) ([]Point, error) {
	points, from, to, err := s.buckets(g, r)
	if err != nil {
		return nil, err
	}
	table := granularityTable[g]
	var tenant, key *string
	if tenantID != "" {
		tenant = &tenantID
	}
	if d.KeyID != "" {
		key = &d.KeyID
	}
	rows, err := s.db.Query(ctx, `SELECT bucket_start, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
		FROM `+table+` WHERE ($1::uuid IS NULL OR tenant_id = $1::uuid) AND bucket_start >= $2 AND bucket_start < $3
		AND ($4::uuid IS NULL OR key_id = $4::uuid) AND ($5 = '' OR resource = $5)
		GROUP BY bucket_start ORDER BY bucket_start`, tenant, from, to, key, d.Resource)
	if err != nil {
		return nil, fmt.Errorf("usage: series: %w", err)
	}
	if err := fillPoints(rows, points); err != nil {
		return nil, fmt.Errorf("usage: series: %w", err)
	}
	return points, nil
}

// forEachCounts calls each for every row of rows, whose columns are those
// scanned into head followed by the sums of allowed, denied, allowed
// units and denied units.
func forEachCounts(rows pgx.Rows, head []any, each func(c metering.Counts)) error {
	var c metering.Counts
	_, err := pgx.ForEachRow(rows, append(head, &c.Allowed, &c.Denied, &c.AllowedUnits, &c.DeniedUnits), func() error {
		each(c)
		return nil
	})
	return err
}

// fillPoints sets the counts of points (in order of time) from rows of a
// bucket's start and its counts, in the same order; buckets without a row
// keep their zeros.
func fillPoints(rows pgx.Rows, points []Point) error {
	i := 0
	var at time.Time
	return forEachCounts(rows, []any{&at}, func(c metering.Counts) {
		for i < len(points) && points[i].At.Before(at) {
			i++
		}
		if i < len(points) && points[i].At.Equal(at) {
			points[i].Counts = c
		}
	})
}

// KeyUsage is one key's usage; KeyID "" counts decisions without a key.
type KeyUsage struct {
	KeyID string `json:"key_id"`
	metering.Counts
}

// ResourceUsage is one resource's usage.
type ResourceUsage struct {
	Resource string `json:"resource"`
	metering.Counts
}

func (s *Reader) grouped(ctx context.Context, tenantID, column string, r Range, limit int,
	scan func(group string, c metering.Counts)) error {
	g, r := r.coarsest()
	if err := s.checkRange(g, r); err != nil {
		return err
	}
	if limit <= 0 || limit > 1000 {
		limit = 10
	}
	if !postgres.IsUUID(tenantID) {
		return nil
	}
	// column and table come from constants.
	rows, err := s.db.Query(ctx, `SELECT `+column+`::text, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
		FROM `+granularityTable[g]+` WHERE tenant_id = $1 AND bucket_start >= $2 AND bucket_start < $3
		GROUP BY 1 ORDER BY 4 DESC, 2 + 3 DESC, 1 LIMIT $4`, tenantID, r.From, r.To, limit)
	if err != nil {
		return fmt.Errorf("usage: top %s: %w", column, err)
	}
	var group string
	err = forEachCounts(rows, []any{&group}, func(c metering.Counts) {
		scan(group, c)
	})
	if err != nil {
		return fmt.Errorf("usage: top %s: %w", column, err)
	}
	return nil
}

// TopKeys returns the tenant's keys with the most allowed units in r
// (then most decisions), at most limit (default 10, at most 1000).
func (s *Reader) TopKeys(ctx context.Context, tenantID string, r Range, limit int) ([]KeyUsage, error) {
	out := []KeyUsage{}
	err := s.grouped(ctx, tenantID, "key_id", r, limit, func(k string, c metering.Counts) {
		if k == nilUUID {
			k = ""
		}
		out = append(out, KeyUsage{KeyID: k, Counts: c})
	})
	return out, err
}

// TopResources returns the tenant's resources with the most allowed
// units in r, like TopKeys.
func (s *Reader) TopResources(ctx context.Context, tenantID string, r Range, limit int) ([]ResourceUsage, error) {
	out := []ResourceUsage{}
	err := s.grouped(ctx, tenantID, "resource", r, limit, func(res string, c metering.Counts) {
		out = append(out, ResourceUsage{Resource: res, Counts: c})
	})
	return out, err
}

// Rejections are a tenant's denials in a range.
type Rejections struct {
	metering.Counts
	// Rate is denied / (allowed + denied); 0 without decisions.
	Rate     float64          `json:"rejection_rate"`
	ByReason map[string]int64 `json:"denied_by_reason"`
	// ByRule counts denials by the rules that denied (comma-separated
	// when several did); decisions denied before any rule ran (unknown
	// key, suspended tenant…) are under "".
	ByRule map[string]int64 `json:"denied_by_rule"`
}

// Rejections returns the tenant's rejection rate in r, with denials by
// reason and by rule.
func (s *Reader) Rejections(ctx context.Context, tenantID string, r Range) (Rejections, error) {
	out := Rejections{ByReason: map[string]int64{}, ByRule: map[string]int64{}}
	g, r := r.coarsest()
	if err := s.checkRange(g, r); err != nil {
		return out, err
	}
	if !postgres.IsUUID(tenantID) {
		return out, nil
	}
	rows, err := s.db.Query(ctx, `SELECT reason, denied_by, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
		FROM `+granularityTable[g]+` WHERE tenant_id = $1 AND bucket_start >= $2 AND bucket_start < $3
		GROUP BY reason, denied_by`, tenantID, r.From, r.To)
	if err != nil {
		return out, fmt.Errorf("usage: rejections: %w", err)
	}
	var reason, deniedBy string
	err = forEachCounts(rows, []any{&reason, &deniedBy}, func(c metering.Counts) {
		out.Add(c)
		if c.Denied > 0 {
			out.ByReason[reason] += c.Denied
			out.ByRule[deniedBy] += c.Denied
		}
	})
	if err != nil {
		return out, fmt.Errorf("usage: rejections: %w", err)
	}
	if n := out.Decisions(); n > 0 {
		out.Rate = float64(out.Denied) / float64(n)
	}
	return out, nil
}

// TenantTotal is one tenant's usage; TenantID "" sums decisions without a
// tenant (anonymous callers, unknown keys).
type TenantTotal = tollgate.TenantTotal

// Totals are operator-wide usage in a range.
type Totals = tollgate.Totals

// Totals returns every tenant's and every tier's usage in r. Each
// tenant's name is names[its ID] (names may be nil): tenants are not
// usage's to look up.
func (s *Reader) Totals(ctx context.Context, r Range, names map[string]string) (Totals, error) {
	out := Totals{ByTenant: []TenantTotal{}, ByTier: map[string]metering.Counts{}}
	g, r := r.coarsest()
	if err := s.checkRange(g, r); err != nil {
		return out, err
	}
	rows, err := s.db.Query(ctx, `SELECT tenant_id::text, tier, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
		FROM `+granularityTable[g]+` WHERE bucket_start >= $1 AND bucket_start < $2
		GROUP BY tenant_id, tier ORDER BY sum(allowed_units) DESC, tenant_id, tier`, r.From, r.To)
	if err != nil {
		return out, fmt.Errorf("usage: totals: %w", err)
	}
	index := map[string]int{}
	var tenantID, tier string
	err = forEachCounts(rows, []any{&tenantID, &tier}, func(c metering.Counts) {
		if tenantID == nilUUID {
			tenantID = ""
		}
		out.Add(c)
		t := out.ByTier[tier]
		t.Add(c)
		out.ByTier[tier] = t
		i, ok := index[tenantID]
		if !ok {
			i = len(out.ByTenant)
			index[tenantID] = i
			out.ByTenant = append(out.ByTenant, TenantTotal{TenantID: tenantID, TenantName: names[tenantID]})
		}
		out.ByTenant[i].Add(c)
	})
	if err != nil {
		return out, fmt.Errorf("usage: totals: %w", err)
	}
	return out, nil
}

// IPUsage is one anonymous address's usage.
type IPUsage struct {
	IP string `json:"ip"`
	metering.Counts
}

// TopIPs are the anonymous addresses with the most decisions in a range.
type TopIPs struct {
	Top []IPUsage `json:"top"`
	// Other sums every other address, including those each batch already
	// folded into OtherIP; Top plus Other is all anonymous traffic.
	Other metering.Counts `json:"other"`
}

// TopIPs returns the anonymous addresses with the most decisions in r
// (widened to whole minutes; minute retention applies), at most limit
// (default 10, at most 1000). An address ranks by the decisions the
// batches counted for it by name: one that was outside a batch's top list
// for a minute is undercounted there (its decisions are in Other).
func (s *Reader) TopIPs(ctx context.Context, r Range, limit int) (TopIPs, error) {
	out := TopIPs{Top: []IPUsage{}}
	_, r = r.coarsest()
	if err := s.checkRange(GranularityMinute, r); err != nil {
		return out, err
	}
	if limit <= 0 || limit > 1000 {
		limit = 10
	}
	err := postgres.ReadTx(ctx, s.db, func(tx pgx.Tx) error {
		err := tx.QueryRow(ctx, `SELECT coalesce(sum(allowed), 0), coalesce(sum(denied), 0),
				coalesce(sum(allowed_units), 0), coalesce(sum(denied_units), 0)
			FROM usage_anon_ip_minute WHERE bucket_start >= $1 AND bucket_start < $2`, r.From, r.To).
			Scan(&out.Other.Allowed, &out.Other.Denied, &out.Other.AllowedUnits, &out.Other.DeniedUnits)
		if err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT ip, sum(allowed), sum(denied), sum(allowed_units), sum(denied_units)
			FROM usage_anon_ip_minute WHERE bucket_start >= $1 AND bucket_start < $2 AND ip <> $3
			GROUP BY ip ORDER BY sum(allowed) + sum(denied) DESC, ip LIMIT $4`, r.From, r.To, metering.OtherIP, limit)
		if err != nil {
			return err
		}
		var ip string
		return forEachCounts(rows, []any{&ip}, func(c metering.Counts) {
			out.Top = append(out.Top, IPUsage{IP: ip, Counts: c})
			out.Other.Allowed -= c.Allowed
			out.Other.Denied -= c.Denied
			out.Other.AllowedUnits -= c.AllowedUnits
			out.Other.DeniedUnits -= c.DeniedUnits
		})
	})
	if err != nil {
		return out, fmt.Errorf("usage: top IPs: %w", err)
	}
	return out, nil
}

// SetAside is a batch, or parts of one, that the usage worker set aside
// (Store.SetAside).
type SetAside struct {
	// EntryID is the stream entry's ID, or the journal claim's; followed
	// by "/refused" when only parts of its batch were set aside, the rest
	// applied.
	EntryID string `json:"entry_id"`
	// Error says why, naming the parts.
	Error      string    `json:"error"`
	RecordedAt time.Time `json:"recorded_at"`
	// Payload is what was set aside, in its wire form (a batch's JSON, a
	// journal's entries).
	Payload string `json:"payload,omitempty"`
}

// SetAsides returns the batches the usage worker set aside, newest first,
// at most limit; with their payloads only when withPayload.
func (r *Reader) SetAsides(ctx context.Context, limit int, withPayload bool) ([]SetAside, error) {
	rows, err := r.db.Query(ctx, `SELECT entry_id, error, recorded_at, CASE WHEN $2 THEN payload ELSE '' END
		FROM usage_bad_batches ORDER BY recorded_at DESC, entry_id LIMIT $1`, limit, withPayload)
	if err != nil {
		return nil, fmt.Errorf("usage: set-aside batches: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (SetAside, error) {
		var b SetAside
		err := row.Scan(&b.EntryID, &b.Error, &b.RecordedAt, &b.Payload)
		return b, err
	})
	if err != nil {
		return nil, fmt.Errorf("usage: set-aside batches: %w", err)
	}
	return list, nil
}
