package usage

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
)

// NilUUID stands for "no tenant" and "no key" in the usage tables.
const NilUUID = "00000000-0000-0000-0000-000000000000"

// Advisory lock keys. Applying a batch holds CloseLock shared, closing a
// month (package billing) holds it exclusively: a batch is either in a
// month's statements or reported as late, never half of each.
const (
	CloseLock     int64 = 7_274_001
	partitionLock int64 = 7_274_002
)

// StoreConfig configures a Store. Zero values take the defaults noted.
type StoreConfig struct {
	// MinuteRetention is how many whole months of minute rows are kept
	// before the current month (default 3; TOLLGATE_USAGE_MINUTE_RETENTION).
	// Older monthly partitions are dropped by Maintain; hours, days and
	// months are kept.
	MinuteRetention int
	// BatchIDRetention is how long applied batch IDs are remembered to
	// reject duplicates (default 30 days). A batch redelivered after that
	// would count twice; redeliveries happen within minutes.
	BatchIDRetention time.Duration
	// SettlementRetention is how long the holds whose settlement was
	// counted are remembered, so that the same hold handed on again (a
	// settlement retried, an expiry racing it) counts nothing (default 7
	// days). A hold is final at most a day and an hour after it opened
	// (plans.MaxHoldTTLS and its record's retention), so only a batch
	// held up in the stream for longer than this could count one twice.
	SettlementRetention time.Duration
	// ResourceCap is how many distinct resources a tenant (and the
	// anonymous callers together) may record in a month (default
	// DefaultResourceCap; TOLLGATE_USAGE_RESOURCE_CAP). A batch's further
	// resources are folded into metering.OtherResource as it is applied,
	// so that a tenant's usage and statement stay bounded whatever paths
	// its callers send; counts stay exact.
	ResourceCap int
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Hooks plug features into the apply path: each runs in the
	// transaction that applies batches, and its sweep every
	// SweepInterval (see Hook). The programs wire them (quota's
	// crossings and rate alerts); nil applies usage alone.
	Hooks []Hook
}

// WithDefaults returns c with its zero values replaced by the defaults
// noted on the fields.
func (c StoreConfig) WithDefaults() StoreConfig {
	if c.MinuteRetention <= 0 {
		c.MinuteRetention = 3
	}
	if c.BatchIDRetention <= 0 {
		c.BatchIDRetention = 30 * 24 * time.Hour
	}
	if c.SettlementRetention <= 0 {
		c.SettlementRetention = 7 * 24 * time.Hour
	}
	if c.ResourceCap <= 0 {
		c.ResourceCap = DefaultResourceCap
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// MinuteCutoff is the start of the oldest month whose minute rows are
// kept, at c.Now; c must have its defaults (WithDefaults).
func (c StoreConfig) MinuteCutoff() time.Time {
	return MonthStart(c.Now()).AddDate(0, -c.MinuteRetention, 0)
}

// Store writes usage to Postgres: batches, rollups, partitions. Safe for
// concurrent use.
type Store struct {
	db  *pgxpool.Pool
	cfg StoreConfig

	mu         sync.Mutex
	partitions map[string]bool // minute partitions known to exist
}

// NewStore returns a Store on db.
func NewStore(db *pgxpool.Pool, cfg StoreConfig) *Store {
	return &Store{db: db, cfg: cfg.WithDefaults(), partitions: map[string]bool{}}
}

// ApplyResult says what Apply did.
type ApplyResult struct {
	// Duplicate is true when the batch had been applied before: nothing
	// changed.
	Duplicate bool
	// LateRows counts rows of the batch that fell in closed months.
	LateRows int
	// Settlements counts the batch's settlements counted now;
	// RepeatedSettlements those of holds counted before (by an earlier
	// batch, or earlier in the same call), which counted nothing.
	Settlements, RepeatedSettlements int
}

// Apply adds the batch's counts to the minute rows and the hour, day and
// month rollups, exactly once: the batch ID is recorded in the same
// transaction, and a batch whose ID is already recorded changes nothing.
// The batch's settlements (metering.Batch.Settlements) count once per
// hold: each hold's hash is recorded in the same transaction, and a hold
// recorded before, by this batch or another, adds nothing.
// Rows in closed months are counted and also listed in usage_late; the
// closed months' statements do not change. A tenant's resources beyond
// its monthly cap (ResourceCap) are recorded as metering.OtherResource.
// Minute rows older than the retention only go to the rollups.
func (s *Store) Apply(ctx context.Context, b metering.Batch) (ApplyResult, error) {
	res, err := s.ApplyAll(ctx, []metering.Batch{b})
	if err != nil {
		return ApplyResult{}, err
	}
	return res[0], nil
}

// ApplyAll applies batches as Apply does, in one transaction: rows of
// many batches merge before they are written, which is what lets a worker
// catch up quickly after an outage. Each batch is still applied exactly
// once (a batch listed twice is a duplicate the second time). Results
// are in the order of batches.
func (s *Store) ApplyAll(ctx context.Context, batches []metering.Batch) ([]ApplyResult, error) {
	return s.applyAll(ctx, batches, nil)
}

// refusedParts is what of a delivered batch is set aside when the rest
// of it is applied (Message.Refused), and the usage_bad_batches entry ID
// it is recorded under; none when entryID is "".
type refusedParts struct {
	entryID string
	refused metering.Refused
}

// applyAll is ApplyAll that also records, in the same transaction, the
// refused parts of each batch it applies now (parts[i], of batches[i];
// parts may be shorter than batches). So the parts are recorded exactly
// when the rest of their batch is: never for a delivery found a
// duplicate (the batch published twice, or delivered again), and not at
// all when Postgres refuses the batch, whose transaction rolls back (the
// worker then sets its entry aside whole, the parts with it).
func (s *Store) applyAll(ctx context.Context, batches []metering.Batch, parts []refusedParts) ([]ApplyResult, error) {
	results := make([]ApplyResult, len(batches))
	if len(batches) == 0 {
		return results, nil
	}
	cutoff := s.minuteCutoff()
	var months []time.Time
	for _, b := range batches {
		for _, r := range b.Rows {
			months = append(months, MonthStart(time.Unix(r.Minute, 0)))
		}
		for _, r := range b.IPs {
			months = append(months, MonthStart(time.Unix(r.Minute, 0)))
		}
		for _, st := range b.Settlements {
			months = append(months, MonthStart(time.Unix(st.Minute, 0)))
		}
	}
	if err := s.ensurePartitions(ctx, months, cutoff); err != nil {
		return nil, err
	}
	// The first occurrence of each ID is the candidate; the transaction
	// finds out which candidates were never applied.
	first := map[string]int{}
	var ids []string
	var rowCounts []int32
	var decisions []int64
	for i, b := range batches {
		if _, seen := first[b.ID]; seen {
			results[i].Duplicate = true
			continue
		}
		first[b.ID] = i
		ids, rowCounts, decisions = append(ids, b.ID), append(rowCounts, int32(len(b.Rows))), append(decisions, b.Decisions())
	}
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock_shared($1)`, CloseLock); err != nil {
			return fmt.Errorf("usage: apply: lock: %w", err)
		}
		rows, err := tx.Query(ctx, `INSERT INTO usage_batches (batch_id, row_count, decisions)
			SELECT * FROM unnest($1::text[], $2::int[], $3::int8[])
			ON CONFLICT (batch_id) DO NOTHING RETURNING batch_id`, ids, rowCounts, decisions)
		if err != nil {
			return fmt.Errorf("usage: apply: record batches: %w", err)
		}
		recorded, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("usage: apply: record batches: %w", err)
		}
		isFresh := map[string]bool{}
		for _, id := range recorded {
			isFresh[id] = true
		}
		var apply []int
		for i, b := range batches {
			if first[b.ID] != i || !isFresh[b.ID] {
				results[i] = ApplyResult{Duplicate: true}
				continue
			}
			results[i] = ApplyResult{}
			apply = append(apply, i)
		}
		if err := recordRefused(ctx, tx, parts, apply); err != nil {
			return err
		}
		// What the batches count from here on: their rows, and the
		// settlements of holds counted for the first time as rows too.
		counted, err := countSettlements(ctx, tx, batches, apply, results)
		if err != nil {
			return err
		}
		var fresh []metering.Row
		for _, b := range counted {
			fresh = append(fresh, b.Rows...)
		}
		fold, err := foldResources(ctx, tx, s.cfg.ResourceCap, fresh)
		if err != nil {
			return err
		}
		minute, hour, day, month := newRollup(), newRollup(), newRollup(), newRollup()
		ips := map[ipKey]metering.Counts{}
		for _, b := range counted {
			for _, r := range b.Rows {
				at := time.Unix(r.Minute, 0).UTC()
				k := dims{tenantID: orNil(r.TenantID), keyID: orNil(r.KeyID), tier: r.Tier, resource: fold.resource(r),
					reason: r.Reason, deniedBy: r.DeniedBy}
				if !at.Before(cutoff) {
					minute.add(at, k, r.Counts)
				}
				hour.add(at.Truncate(time.Hour), k, r.Counts)
				day.add(time.Date(at.Year(), at.Month(), at.Day(), 0, 0, 0, 0, time.UTC), k, r.Counts)
				month.add(MonthStart(at), k, r.Counts)
			}
			for _, r := range b.IPs {
				if at := time.Unix(r.Minute, 0).UTC(); !at.Before(cutoff) {
					c := ips[ipKey{at, r.IP}]
					c.Add(r.Counts)
					ips[ipKey{at, r.IP}] = c
				}
			}
		}
		for _, t := range []struct {
			table string
			r     rollup
		}{{"usage_minute", minute}, {"usage_hour", hour}, {"usage_day", day}, {"usage_month", month}} {
			if err := upsertRollup(ctx, tx, t.table, t.r); err != nil {
				return err
			}
		}
		if err := upsertIPs(ctx, tx, ips); err != nil {
			return err
		}
		if err := upsertTotals(ctx, tx, minute, hour); err != nil {
			return err
		}
		if len(s.cfg.Hooks) > 0 {
			now := s.cfg.Now()
			for _, h := range s.cfg.Hooks {
				if err := h.Applied(ctx, tx, counted, now); err != nil {
					return err
				}
			}
		}
		closed, err := closedMonths(ctx, tx, month)
		if err != nil || len(closed) == 0 {
			return err
		}
		for j, i := range apply {
			if results[i].LateRows, err = recordLate(ctx, tx, counted[j], closed, fold); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		if postgres.Is(err, postgres.CheckViolation) { // no partition for a row
			s.forgetPartitions()
		}
		return nil, fmt.Errorf("usage: apply %d batches from %s: %w", len(batches), batches[0].ID, err)
	}
	return results, nil
}

// countSettlements records, in tx, the holds of the settlements of the
// batches at indexes apply (those applied now) and returns those batches
// as they count: each with its rows, then a row per settlement of a hold
// never recorded before (metering.Settlement.Row; an anonymous caller's
// also under its IP), and without Settlements. A hold listed twice counts
// in its first batch. It sets the results' settlement counts.
//
// The hashes are inserted in order, so that two transactions recording
// the same holds wait for each other rather than deadlock; the second
// finds them recorded once the first commits, and counts nothing for
// them.
func countSettlements(ctx context.Context, tx pgx.Tx, batches []metering.Batch, apply []int, results []ApplyResult) ([]metering.Batch, error) {
	firstOf := map[string]int{} // hold hash → batch index
	var hashes []string
	for _, i := range apply {
		for _, st := range batches[i].Settlements {
			if _, seen := firstOf[st.HoldHash]; seen {
				continue
			}
			firstOf[st.HoldHash] = i
			hashes = append(hashes, st.HoldHash)
		}
	}
	isNew := map[string]bool{}
	if len(hashes) > 0 {
		slices.Sort(hashes)
		rows, err := tx.Query(ctx, `INSERT INTO usage_settlements (hold_hash)
			SELECT decode(h, 'hex') FROM unnest($1::text[]) WITH ORDINALITY AS x(h, n) ORDER BY n
			ON CONFLICT (hold_hash) DO NOTHING RETURNING encode(hold_hash, 'hex')`, hashes)
		if err != nil {
			return nil, fmt.Errorf("usage: apply: record settlements: %w", err)
		}
		recorded, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return nil, fmt.Errorf("usage: apply: record settlements: %w", err)
		}
		for _, h := range recorded {
			isNew[h] = true
		}
	}
	counted := make([]metering.Batch, len(apply))
	for j, i := range apply {
		b := batches[i]
		b.Settlements = nil
		if len(batches[i].Settlements) == 0 {
			counted[j] = b
			continue
		}
		b.Rows = slices.Clip(b.Rows)
		b.IPs = slices.Clip(b.IPs)
		for _, st := range batches[i].Settlements {
			if firstOf[st.HoldHash] != i || !isNew[st.HoldHash] {
				results[i].RepeatedSettlements++
				continue
			}
			delete(isNew, st.HoldHash) // a hold listed twice in one batch counts once
			results[i].Settlements++
			r := st.Row()
			b.Rows = append(b.Rows, r)
			if st.IP != "" {
				b.IPs = append(b.IPs, metering.IPRow{Minute: st.Minute, IP: st.IP, Counts: r.Counts})
			}
		}
		counted[j] = b
	}
	return counted, nil
}

// Sweep runs the hooks' sweeps (Hook.Sweep) at the store's clock, one
// after the other, all of them even when one fails: what no usage comes to
// show (alerts to resolve, crossings to find) is found this way. The usage
// worker calls it every SweepInterval, busy or idle. It returns the first
// error.
func (s *Store) Sweep(ctx context.Context) error {
	now := s.cfg.Now()
	var first error
	for _, h := range s.cfg.Hooks {
		if err := h.Sweep(ctx, now); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func orNil(id string) string {
	if id == "" {
		return NilUUID
	}
	return id
}

// dims are a usage row's dimensions besides its time bucket.
type dims struct {
	tenantID, keyID, tier, resource, reason, deniedBy string
}

type bucketKey struct {
	at time.Time
	dims
}

type rollup map[bucketKey]metering.Counts

func newRollup() rollup { return rollup{} }

func (r rollup) add(at time.Time, d dims, c metering.Counts) {
	k := bucketKey{at, d}
	cur := r[k]
	cur.Add(c)
	r[k] = cur
}

// sortedKeys orders keys as the primary key does, so that concurrent
// transactions lock rows in one order and cannot deadlock.
func (r rollup) sortedKeys() []bucketKey {
	keys := make([]bucketKey, 0, len(r))
	for k := range r {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		switch {
		case a.tenantID != b.tenantID:
			return a.tenantID < b.tenantID
		case !a.at.Equal(b.at):
			return a.at.Before(b.at)
		case a.keyID != b.keyID:
			return a.keyID < b.keyID
		case a.tier != b.tier:
			return a.tier < b.tier
		case a.resource != b.resource:
			return a.resource < b.resource
		case a.reason != b.reason:
			return a.reason < b.reason
		}
		return a.deniedBy < b.deniedBy
	})
	return keys
}

func upsertRollup(ctx context.Context, tx pgx.Tx, table string, r rollup) error {
	if len(r) == 0 {
		return nil
	}
	n := len(r)
	var (
		tenant, key, tier, resource, reason, deniedBy = make([]string, 0, n), make([]string, 0, n),
			make([]string, 0, n), make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
		at                   = make([]time.Time, 0, n)
		a, d, aUnits, dUnits = make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n), make([]int64, 0, n)
		expired              = make([]int64, 0, n)
	)
	for _, k := range r.sortedKeys() {
		c := r[k]
		tenant, at, key = append(tenant, k.tenantID), append(at, k.at), append(key, k.keyID)
		tier, resource, reason, deniedBy = append(tier, k.tier), append(resource, k.resource),
			append(reason, k.reason), append(deniedBy, k.deniedBy)
		a, d, aUnits, dUnits = append(a, c.Allowed), append(d, c.Denied), append(aUnits, c.AllowedUnits),
			append(dUnits, c.DeniedUnits)
		expired = append(expired, c.ExpiredHolds)
	}
	// table is one of four constants.
	_, err := tx.Exec(ctx, `INSERT INTO `+table+` AS u (tenant_id, bucket_start, key_id, tier, resource,
			reason, denied_by, allowed, denied, allowed_units, denied_units, expired_holds)
		SELECT t::uuid, b, k::uuid, tr, rs, rn, db, a, d, au, du, eh
		FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[],
			$7::text[], $8::int8[], $9::int8[], $10::int8[], $11::int8[], $12::int8[])
			AS x(t, b, k, tr, rs, rn, db, a, d, au, du, eh)
		ON CONFLICT (tenant_id, bucket_start, key_id, tier, resource, reason, denied_by) DO UPDATE SET
			allowed = u.allowed + EXCLUDED.allowed, denied = u.denied + EXCLUDED.denied,
			allowed_units = u.allowed_units + EXCLUDED.allowed_units,
			denied_units = u.denied_units + EXCLUDED.denied_units,
			expired_holds = u.expired_holds + EXCLUDED.expired_holds`,
		tenant, at, key, tier, resource, reason, deniedBy, a, d, aUnits, dUnits, expired)
	if err != nil {
		return fmt.Errorf("usage: apply: %s: %w", table, err)
	}
	return nil
}

// upsertTotals adds the rollups' counts, all tenants and callers
// together, to the minute and hour totals (usage_total_minute,
// usage_total_hour), in the order of their keys.
func upsertTotals(ctx context.Context, tx pgx.Tx, minute, hour rollup) error {
	for _, t := range []struct {
		table string
		r     rollup
	}{{"usage_total_minute", minute}, {"usage_total_hour", hour}} {
		if len(t.r) == 0 {
			continue
		}
		sums := map[time.Time]metering.Counts{}
		for k, c := range t.r {
			s := sums[k.at]
			s.Add(c)
			sums[k.at] = s
		}
		at := make([]time.Time, 0, len(sums))
		for b := range sums {
			at = append(at, b)
		}
		sort.Slice(at, func(i, j int) bool { return at[i].Before(at[j]) })
		a, d, au, du := make([]int64, len(at)), make([]int64, len(at)), make([]int64, len(at)), make([]int64, len(at))
		for i, b := range at {
			c := sums[b]
			a[i], d[i], au[i], du[i] = c.Allowed, c.Denied, c.AllowedUnits, c.DeniedUnits
		}
		// table is one of two constants.
		_, err := tx.Exec(ctx, `INSERT INTO `+t.table+` AS u (bucket_start, allowed, denied, allowed_units, denied_units)
			SELECT * FROM unnest($1::timestamptz[], $2::int8[], $3::int8[], $4::int8[], $5::int8[])
			ON CONFLICT (bucket_start) DO UPDATE SET
				allowed = u.allowed + EXCLUDED.allowed, denied = u.denied + EXCLUDED.denied,
				allowed_units = u.allowed_units + EXCLUDED.allowed_units,
				denied_units = u.denied_units + EXCLUDED.denied_units`, at, a, d, au, du)
		if err != nil {
			return fmt.Errorf("usage: apply: %s: %w", t.table, err)
		}
	}
	return nil
}

type ipKey struct {
	at time.Time
	ip string
}

func upsertIPs(ctx context.Context, tx pgx.Tx, ips map[ipKey]metering.Counts) error {
	if len(ips) == 0 {
		return nil
	}
	keys := make([]ipKey, 0, len(ips))
	for k := range ips {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if !keys[i].at.Equal(keys[j].at) {
			return keys[i].at.Before(keys[j].at)
		}
		return keys[i].ip < keys[j].ip
	})
	at, ip := make([]time.Time, len(keys)), make([]string, len(keys))
	a, d, aUnits, dUnits := make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys)), make([]int64, len(keys))
	for i, k := range keys {
		c := ips[k]
		at[i], ip[i], a[i], d[i], aUnits[i], dUnits[i] = k.at, k.ip, c.Allowed, c.Denied, c.AllowedUnits, c.DeniedUnits
	}
	_, err := tx.Exec(ctx, `INSERT INTO usage_anon_ip_minute AS u (bucket_start, ip, allowed, denied,
			allowed_units, denied_units)
		SELECT * FROM unnest($1::timestamptz[], $2::text[], $3::int8[], $4::int8[], $5::int8[], $6::int8[])
		ON CONFLICT (bucket_start, ip) DO UPDATE SET
			allowed = u.allowed + EXCLUDED.allowed, denied = u.denied + EXCLUDED.denied,
			allowed_units = u.allowed_units + EXCLUDED.allowed_units,
			denied_units = u.denied_units + EXCLUDED.denied_units`, at, ip, a, d, aUnits, dUnits)
	if err != nil {
		return fmt.Errorf("usage: apply: anonymous IPs: %w", err)
	}
	return nil
}

// closedMonths returns which of the months tenant rows touch are closed
// ("2006-01" → true).
func closedMonths(ctx context.Context, tx pgx.Tx, months rollup) (map[string]bool, error) {
	var touched []time.Time
	seen := map[time.Time]bool{}
	for k := range months {
		if k.tenantID != NilUUID && !seen[k.at] {
			seen[k.at] = true
			touched = append(touched, k.at)
		}
	}
	if len(touched) == 0 {
		return nil, nil
	}
	rows, err := tx.Query(ctx, `SELECT month FROM usage_closed_months WHERE month = ANY($1::date[])`, touched)
	if err != nil {
		return nil, fmt.Errorf("usage: apply: closed months: %w", err)
	}
	list, err := pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		return nil, fmt.Errorf("usage: apply: closed months: %w", err)
	}
	closed := map[string]bool{}
	for _, m := range list {
		closed[m.Format("2006-01")] = true
	}
	return closed, nil
}

// recordLate lists the batch's tenant rows that fall in closed months,
// under the resources they are recorded under (fold).
func recordLate(ctx context.Context, tx pgx.Tx, b metering.Batch, closed map[string]bool, fold folded) (int, error) {
	n := 0
	for _, r := range b.Rows {
		at := time.Unix(r.Minute, 0).UTC()
		if r.TenantID == "" || !closed[at.Format("2006-01")] {
			continue
		}
		_, err := tx.Exec(ctx, `INSERT INTO usage_late (batch_id, month, tenant_id, key_id, resource,
			bucket_start, allowed, denied, allowed_units, denied_units)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
			b.ID, MonthStart(at), r.TenantID, orNil(r.KeyID), fold.resource(r), at,
			r.Allowed, r.Denied, r.AllowedUnits, r.DeniedUnits)
		if err != nil {
			return 0, fmt.Errorf("usage: apply: record late usage: %w", err)
		}
		n++
	}
	return n, nil
}

// MonthStart returns the first instant of t's UTC month.
func MonthStart(t time.Time) time.Time {
	t = t.UTC()
	return time.Date(t.Year(), t.Month(), 1, 0, 0, 0, 0, time.UTC)
}

// minuteCutoff is the start of the oldest month whose minute rows are
// kept.
func (s *Store) minuteCutoff() time.Time { return s.cfg.MinuteCutoff() }

// partitioned are the tables split into monthly partitions.
var partitioned = []string{"usage_minute", "usage_anon_ip_minute"}

func partitionName(table string, month time.Time) string {
	return table + "_" + month.Format("200601")
}

// ensurePartitions creates the monthly partitions the given months need,
// skipping months before cutoff. It runs outside the apply transaction,
// so that the DDL's locks are held only for a moment.
func (s *Store) ensurePartitions(ctx context.Context, months []time.Time, cutoff time.Time) error {
	s.mu.Lock()
	var missing []time.Time
	seen := map[time.Time]bool{}
	for _, m := range months {
		if m.Before(cutoff) || seen[m] || s.partitions[partitionName(partitioned[0], m)] {
			continue
		}
		seen[m] = true
		missing = append(missing, m)
	}
	s.mu.Unlock()
	if len(missing) == 0 {
		return nil
	}
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, partitionLock); err != nil {
			return err
		}
		for _, m := range missing {
			for _, table := range partitioned {
				name := partitionName(table, m)
				var exists bool
				if err := tx.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&exists); err != nil {
					return err
				}
				if exists {
					continue
				}
				// Names and bounds come from time.Format: no injection.
				_, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
					name, table, m.Format(time.RFC3339), m.AddDate(0, 1, 0).Format(time.RFC3339)))
				if err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("usage: create partitions: %w", err)
	}
	s.mu.Lock()
	for _, m := range missing {
		s.partitions[partitionName(partitioned[0], m)] = true
	}
	s.mu.Unlock()
	return nil
}

func (s *Store) forgetPartitions() {
	s.mu.Lock()
	s.partitions = map[string]bool{}
	s.mu.Unlock()
}

// MaintenanceResult says what Maintain did.
type MaintenanceResult struct {
	Dropped       []string // partitions dropped
	PurgedBatches int64    // batch IDs forgotten
	// PurgedSettlements counts the holds' hashes forgotten.
	PurgedSettlements int64
}

// Maintain creates the minute partitions of the current and the next two
// months, drops those older than the retention, and forgets batch IDs
// older than BatchIDRetention and holds' hashes older than
// SettlementRetention. Safe to run from several workers at once.
func (s *Store) Maintain(ctx context.Context) (MaintenanceResult, error) {
	var res MaintenanceResult
	now := s.cfg.Now()
	cur := MonthStart(now)
	cutoff := s.minuteCutoff()
	if err := s.ensurePartitions(ctx, []time.Time{cur, cur.AddDate(0, 1, 0), cur.AddDate(0, 2, 0)}, cutoff); err != nil {
		return res, err
	}
	err := postgres.Tx(ctx, s.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, partitionLock); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT c.relname FROM pg_inherits i
			JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_class p ON p.oid = i.inhparent
			WHERE p.relname = ANY($1) ORDER BY c.relname`, partitioned)
		if err != nil {
			return err
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, name := range names {
			suffix := name[strings.LastIndexByte(name, '_')+1:]
			m, err := time.Parse("200601", suffix)
			if err != nil || !m.Before(cutoff) {
				continue
			}
			if _, err := tx.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize()); err != nil {
				return err
			}
			res.Dropped = append(res.Dropped, name)
		}
		return nil
	})
	if err != nil {
		return res, fmt.Errorf("usage: drop old partitions: %w", err)
	}
	if len(res.Dropped) > 0 {
		s.forgetPartitions()
	}
	// The minute totals are kept as long as the minute rows.
	if _, err := s.db.Exec(ctx, `DELETE FROM usage_total_minute WHERE bucket_start < $1`, cutoff); err != nil {
		return res, fmt.Errorf("usage: drop old minute totals: %w", err)
	}
	if res.PurgedBatches, err = s.purgeInChunks(ctx, "usage_batches", "batch_id", now.Add(-s.cfg.BatchIDRetention)); err != nil {
		return res, fmt.Errorf("usage: forget old batch IDs: %w", err)
	}
	if res.PurgedSettlements, err = s.purgeInChunks(ctx, "usage_settlements", "hold_hash", now.Add(-s.cfg.SettlementRetention)); err != nil {
		return res, fmt.Errorf("usage: forget old settlements: %w", err)
	}
	return res, nil
}

// purgeChunk is how many rows purgeInChunks deletes in one statement.
const purgeChunk = 10000

// purgeInChunks deletes the rows of table applied before cutoff, purgeChunk
// rows (named by the key column id) at a time, and returns how many it
// deleted.
func (s *Store) purgeInChunks(ctx context.Context, table, id string, cutoff time.Time) (int64, error) {
	t, c := pgx.Identifier{table}.Sanitize(), pgx.Identifier{id}.Sanitize()
	var purged int64
	for {
		tag, err := s.db.Exec(ctx, `DELETE FROM `+t+` WHERE `+c+` IN (
			SELECT `+c+` FROM `+t+` WHERE applied_at < $1 LIMIT $2)`, cutoff, purgeChunk)
		if err != nil {
			return purged, err
		}
		purged += tag.RowsAffected()
		if tag.RowsAffected() < purgeChunk {
			return purged, nil
		}
	}
}

// SetAside records a stream entry or journal claim that is not a valid
// batch, or the parts of one that can never be applied, under entryID,
// so that it stops blocking the stream and can be inspected (SetAsides).
// Recording the same entryID again changes nothing. The payload is kept
// as text: invalid UTF-8 becomes "?" and a NUL character (a journal's
// separator) "\x00", which Postgres text cannot hold.
func (s *Store) SetAside(ctx context.Context, entryID string, payload []byte, reason error) error {
	_, err := s.db.Exec(ctx, `INSERT INTO usage_bad_batches (entry_id, payload, error) VALUES ($1, $2, $3)
		ON CONFLICT (entry_id) DO NOTHING`, storable(entryID), storable(string(payload)), storable(reason.Error()))
	if err != nil {
		return fmt.Errorf("usage: set aside bad batch: %w", err)
	}
	return nil
}

// recordRefused records in usage_bad_batches, in tx, the refused parts
// of the batches at indexes apply (those applied now), in one statement.
// An entry ID recorded before keeps its record.
func recordRefused(ctx context.Context, tx pgx.Tx, parts []refusedParts, apply []int) error {
	var entryIDs, payloads, reasons []string
	for _, i := range apply {
		if i >= len(parts) || parts[i].entryID == "" {
			continue
		}
		p := parts[i]
		entryIDs = append(entryIDs, storable(p.entryID))
		payloads = append(payloads, storable(string(p.refused.Payload)))
		reasons = append(reasons, storable(p.refused.Err().Error()))
	}
	if len(entryIDs) == 0 {
		return nil
	}
	if _, err := tx.Exec(ctx, `INSERT INTO usage_bad_batches (entry_id, payload, error)
		SELECT * FROM unnest($1::text[], $2::text[], $3::text[])
		ON CONFLICT (entry_id) DO NOTHING`, entryIDs, payloads, reasons); err != nil {
		return fmt.Errorf("usage: apply: set aside refused parts: %w", err)
	}
	return nil
}

// setAsideWhole records, as SetAside does, an entry whose batch Postgres
// refused, its payload the whole entry, and deletes in the same
// statement the record of its refused parts (partsID), which the
// payload holds too: recorded once, not twice. Only a release before
// the parts were recorded with their batch's apply can have left one.
func (s *Store) setAsideWhole(ctx context.Context, entryID, partsID string, payload []byte, reason error) error {
	_, err := s.db.Exec(ctx, `WITH parts AS (DELETE FROM usage_bad_batches WHERE entry_id = $4)
		INSERT INTO usage_bad_batches (entry_id, payload, error) VALUES ($1, $2, $3)
		ON CONFLICT (entry_id) DO NOTHING`, storable(entryID), storable(string(payload)), storable(reason.Error()), storable(partsID))
	if err != nil {
		return fmt.Errorf("usage: set aside bad batch: %w", err)
	}
	return nil
}

// storable returns s as text Postgres can store: invalid UTF-8 as "?",
// NUL as "\x00".
func storable(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "?"), "\x00", `\x00`)
}

// StoreProducer applies batches straight to Postgres: the producer of
// single-process mode (TOLLGATE_STORE=memory), where there is no stream
// and no worker. A failed Apply is retried by the aggregator with the same
// batch, so it too is exactly-once.
type StoreProducer struct{ Store *Store }

// Publish applies b.
func (p StoreProducer) Publish(ctx context.Context, b metering.Batch) error {
	_, err := p.Store.Apply(ctx, b)
	return err
}

// MaintainEvery runs Maintain now and then every interval, and Sweep
// every SweepInterval, until ctx ends, logging failures: for processes
// that apply batches without a Worker (an api process in single-process
// mode).
func (s *Store) MaintainEvery(ctx context.Context, every time.Duration, log *slog.Logger) {
	var nextMaintenance time.Time
	for {
		if now := time.Now(); !now.Before(nextMaintenance) {
			if _, err := s.Maintain(ctx); err != nil && ctx.Err() == nil {
				log.Warn("usage: maintenance failed", "err", err)
			}
			nextMaintenance = now.Add(every)
		}
		if err := s.Sweep(ctx); err != nil && ctx.Err() == nil {
			log.Warn("usage: sweep failed; retrying later", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(min(every, SweepInterval)):
		}
	}
}

// SweepInterval is how often MaintainEvery sweeps (Sweep), as the usage
// worker does.
const SweepInterval = 30 * time.Second
