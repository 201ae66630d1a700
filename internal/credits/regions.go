package credits

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/usage"
)

// A balance in a deployment of several regions (docs/regions.md,
// "Money"). The ledger in the one Postgres stays the only authority;
// each region draws on its own Redis, on an escrow the region's drainer
// reserves to it from the balance in the ledger's transaction, so that
// the regions together never hold more than the balance and its
// overdraft, and a region cut off from the ledger draws at most what it
// holds.
//
// The region's counter stands at counted − escrow (credit_regions): what
// the region's checks drew less what was reserved to it. The check path
// in a region sees a line of 0 and no overdraft (Hot in LoadRegion), so a
// check draws while the counter stays at or below zero: on the escrow
// alone. Reserving more is a decrement of the counter, after the ledger's
// commit; taking escrow back (ReclaimCredits) an atomic increment before
// it. Escrow is reserved only from units that do not expire within
// RegionConfig.Margin, and it lapses (lapse_at, an expiry of the whole
// line in the check script) at the soonest expiry of the grants it was
// reserved from, so a region cut off never draws a unit past its grant's
// expiry. A grant expires in the ledger only once every region holding
// escrow, or drawing at its last drain (within drawingHorizonUS), has
// recorded its draws up to the expiry.
//
// A plan in overage mode reserves nothing: every draw of a region is
// counted past its escrow (as overage), and the drainer draws it on the
// balance the regions do not hold, in the order it records them. Its
// tenants are never refused, and the ledger's balance stops at
// −overdraft as in one region.

// lapsedUnits is the expiry a lapsed escrow takes off the line: more
// than any escrow, and exact in the script's numbers (doubles).
const lapsedUnits = 1 << 50

// regionRow is one region's share of a tenant's balance.
type regionRow struct {
	Region   string
	Position string
	// Counted is the units the region's counter added; Escrow the units
	// reserved to it.
	Counted, Escrow int64
	// Demand is the units its last drain recorded; ThroughUS the store's
	// clock of that drain's read.
	Demand, ThroughUS int64
	LapseAt           *time.Time
}

// changed reports whether r differs from before enough to be written:
// its drain's time counts only while other regions' expiries wait on it
// (waitedOn), and then every two seconds; and at the first drain of a
// month, so that a close can tell whether the region's drainer passed
// the month's end (Behind).
func (r *regionRow) changed(before regionRow) bool {
	same := func(a, b *time.Time) bool { return a == nil && b == nil || a != nil && b != nil && a.Equal(*b) }
	a, b := *r, before
	a.LapseAt, b.LapseAt, a.ThroughUS, b.ThroughUS = nil, nil, 0, 0
	stale := (r.waitedOn(r.ThroughUS) || before.Demand > 0) && r.ThroughUS-before.ThroughUS >= 2e6
	newMonth := !usage.MonthOf(time.UnixMicro(r.ThroughUS)).Start().Equal(usage.MonthOf(time.UnixMicro(before.ThroughUS)).Start())
	return a != b || stale || newMonth || !same(r.LapseAt, before.LapseAt)
}

// drawingHorizonUS is how long after its last drain a region that was
// drawing (without escrow: an overage plan, or past its escrow) still
// holds up other regions' grant expiries: long enough for a drainer's
// pass to come late, short enough that a region gone for good does not
// keep every grant from expiring.
const drawingHorizonUS = 60_000_000

// waitedOn reports whether other regions' grant expiries wait for this
// region's drains, newest being the latest drain's clock of any region:
// while it holds escrow, which it may draw cut off; and while it drew at
// its last drain, within drawingHorizonUS, since what it drew since may
// have been drawn before an expiry and not yet recorded.
func (r *regionRow) waitedOn(newest int64) bool {
	return r.held() > 0 || r.Demand > 0 && r.ThroughUS >= newest-drawingHorizonUS
}

// held is what the region may still draw: escrow − counted (never less
// than 0 in the sums, so a region that drew past it frees nothing).
func (r *regionRow) held() int64 { return max(0, r.Escrow-r.Counted) }

// regionDrain is the regions' rows of the balance being drained, the
// draining region's first.
type regionDrain struct {
	own  *regionRow
	rows []*regionRow
	// added is true when own is new: the region has no row yet.
	added bool
	// safeUS is the time up to which every region holding escrow has
	// recorded its draws: grants expire no later.
	safeUS int64
}

// held is the units the regions hold in escrow (0 for a nil reg).
func (reg *regionDrain) held() int64 {
	if reg == nil {
		return 0
	}
	var sum int64
	for _, r := range reg.rows {
		sum += r.held()
	}
	return sum
}

// expiryAt is at, or the safe time when a region's draws before at may
// be unrecorded.
func (reg *regionDrain) expiryAt(at time.Time) time.Time {
	if reg == nil || reg.safeUS >= at.UnixMicro() {
		return at
	}
	return time.UnixMicro(reg.safeUS).UTC()
}

// regionRows reads every region's row of tenantID's balance (the caller
// holds the account's lock), with region's first: a new one (added) if it
// has none, whose log's start the caller places (logStart).
func (s *Store) regionRows(ctx context.Context, tenantID, region string) (*regionDrain, error) {
	rows, err := s.db.Query(ctx, `SELECT region, position, counted, escrow, demand, through_us, lapse_at
		FROM credit_regions WHERE tenant_id = $1::uuid ORDER BY region`, tenantID)
	list, err := postgres.Collect(rows, err, func(r pgx.Row) (*regionRow, error) {
		x := &regionRow{}
		return x, r.Scan(&x.Region, &x.Position, &x.Counted, &x.Escrow, &x.Demand, &x.ThroughUS, &x.LapseAt)
	}, "credits: regions")
	if err != nil {
		return nil, err
	}
	reg := &regionDrain{rows: list, safeUS: math.MaxInt64}
	for _, x := range list {
		if x.Region == region {
			reg.own = x
		}
	}
	if reg.own == nil {
		reg.own, reg.added = &regionRow{Region: region}, true
		reg.rows = append(reg.rows, reg.own)
	}
	var newest int64
	for _, x := range reg.rows {
		newest = max(newest, x.ThroughUS)
	}
	for _, x := range reg.rows {
		if x != reg.own && x.waitedOn(newest) {
			reg.safeUS = min(reg.safeUS, x.ThroughUS)
		}
	}
	return reg, nil
}

func (s *Store) saveRegionRow(ctx context.Context, tenantID string, x *regionRow) error {
	_, err := s.db.Exec(ctx, `INSERT INTO credit_regions (tenant_id, region, position, counted, escrow, demand, through_us, lapse_at)
		VALUES ($1::uuid, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (tenant_id, region) DO UPDATE SET position = EXCLUDED.position, counted = EXCLUDED.counted,
		escrow = EXCLUDED.escrow, demand = EXCLUDED.demand, through_us = EXCLUDED.through_us, lapse_at = EXCLUDED.lapse_at,
		updated_at = now()`, tenantID, x.Region, x.Position, x.Counted, x.Escrow, x.Demand, x.ThroughUS, x.LapseAt)
	if err != nil {
		return fmt.Errorf("credits: save region %s of %s: %w", x.Region, tenantID, err)
	}
	return nil
}

// Escrow is one region's share of a tenant's balance, as operators see
// it.
type Escrow struct {
	Region string `json:"region"`
	// Escrow is the units reserved to the region; Counted what its
	// checks drew of them, as far as the ledger has recorded; Held the
	// difference, what it may still draw.
	Escrow  int64      `json:"escrow"`
	Counted int64      `json:"counted"`
	Held    int64      `json:"held"`
	LapseAt *time.Time `json:"lapse_at"`
}

// Escrows returns the regions' shares of tenant tenantID's balance, by
// region name (none in a deployment of one region).
func (s *Store) Escrows(ctx context.Context, tenantID string) ([]Escrow, error) {
	if !tollgate.IsUUID(tenantID) {
		return nil, tollgate.Errorf(tollgate.ENOTFOUND, "tenant %s not found", tenantID)
	}
	rows, err := s.db.Query(ctx, `SELECT region, escrow, counted, lapse_at FROM credit_regions
		WHERE tenant_id = $1::uuid ORDER BY region`, tenantID)
	return postgres.Collect(rows, err, func(r pgx.Row) (Escrow, error) {
		var e Escrow
		err := r.Scan(&e.Region, &e.Escrow, &e.Counted, &e.LapseAt)
		e.Held = max(0, e.Escrow-e.Counted)
		return e, err
	}, "credits: escrows")
}

// LoadRegion is LoadAll as the check path of region sees it: each
// balance's line is 0 with no overdraft, so a check draws on the
// region's escrow alone (its counter below zero), and the escrow lapses
// at its lapse_at.
func (s *Store) LoadRegion(ctx context.Context, region string) (All, error) {
	all, err := s.LoadAll(ctx)
	if err != nil {
		return all, err
	}
	rows, err := s.db.Query(ctx, `SELECT tenant_id::text, lapse_at FROM credit_regions
		WHERE region = $1 AND lapse_at IS NOT NULL`, region)
	lapses := map[string]time.Time{}
	_, err = postgres.Collect(rows, err, func(r pgx.Row) (string, error) {
		var id string
		var at time.Time
		err := r.Scan(&id, &at)
		lapses[id] = at
		return id, err
	}, "credits: region lapses")
	if err != nil {
		return nil, err
	}
	for id, h := range all {
		h.Line, h.Consumed, h.Overdraft, h.Expiring = 0, 0, 0, nil
		if at, ok := lapses[id]; ok {
			h.Expiring = []Expiring{{AtUS: at.UnixMicro(), Remaining: lapsedUnits}}
		}
		h.Prepare()
	}
	return all, nil
}

// balanceEscrow moves the region's escrow toward its target once its
// log is recorded: it returns the units to reserve (a decrement of the
// counter after the commit). Units taken back are taken at once, in the
// store, before the commit. usable is the balance and its overdraft less
// the units of grants that expire within the margin; the target is
// usable split by the regions' demand (an idle region keeps a small
// share, so its first checks need no drain).
func (d *Drainer) balanceEscrow(ctx context.Context, reg *regionDrain, counter string, present bool, usable int64, deny bool) (reserve int64, err error) {
	own := reg.own
	var target int64
	if deny && usable > 0 {
		var demand int64
		for _, x := range reg.rows {
			demand += x.Demand
		}
		regions := int64(max(len(reg.rows), d.cfg.Regions))
		// In floating point: the product may pass int64 on large
		// balances, and the target is a heuristic (free bounds the rest).
		target = max(1, int64(float64(usable)*float64(own.Demand+1)/float64(demand+regions)))
	}
	held, free := own.held(), usable-reg.held()
	switch {
	case free < 0 || held > 2*target:
		// Never more than the escrow: a region that gave back more than
		// it drew here (counted below 0: holds drawn before the regions,
		// refunded after) holds past its escrow, which is not this
		// region's to take back.
		want := min(held, max(held-target, -free), own.Escrow)
		if want <= 0 {
			return 0, nil
		}
		taken := want // a missing counter draws nothing: its escrow is the ledger's to move
		if present {
			if taken, err = d.logs.ReclaimCredits(ctx, counter, want); err != nil {
				return 0, err
			}
		}
		own.Escrow -= taken
	case held < target && free > 0:
		reserve = min(target-held, free)
		own.Escrow += reserve
	}
	return reserve, nil
}

// lapse returns the soonest expiry after cutoff of the live grants with
// units left (nil when none expires), and the units of those expiring at
// or before cutoff: what no escrow is reserved from.
func (b *book) lapse(ctx context.Context, cutoff time.Time) (*time.Time, int64, error) {
	grants, err := b.live(ctx)
	if err != nil {
		return nil, 0, err
	}
	var soonest *time.Time
	var expiring int64
	for _, g := range grants {
		switch {
		case g.ExpiresAt == nil || g.Remaining == 0:
		case !g.ExpiresAt.After(cutoff):
			expiring += g.Remaining
		case soonest == nil || g.ExpiresAt.Before(*soonest):
			at := *g.ExpiresAt
			soonest = &at
		}
	}
	return soonest, expiring, nil
}

// logStart returns where a region's first drain of a balance starts
// reading the region's log: after the account's position (the last entry
// the drainer of one region recorded) when the region's Redis is the one
// that position is of, and from the log's beginning otherwise.
//
// The account's position is an entry ID of the log of the Redis the
// drainer of one region read, by that Redis's clock; that drainer keeps
// an identity beside the log in its Redis and writes it on the account
// (log_origin).
// The region whose Redis carries the account's identity skips the
// entries up to the position, which it may still log (a failed trim), and
// recorded already: a drainer of one region keyed their ledger rows by
// its Redis's identity ("origin:ID"; the bare entry ID before identities
// were kept), a region's drainer keys them "region:ID", so nothing else
// would keep them from being recorded twice. Whether its counter
// exists tells nothing there: a failover to a replica can lose it, and
// in overage mode the checks' deferred draws can keep it from being made.
// Any other region's Redis is new to the balance and its log's IDs come
// from its own clock, which may be behind that position: read after it,
// those entries would never be recorded, and the drift repair would let
// the region draw their units again.
//
// An account no drainer of one region wrote an identity on (it last
// drained before identities were kept), or a store that keeps none, falls
// back on the counter: the Redis holding it is taken for the one the
// position is of.
func (d *Drainer) logStart(ctx context.Context, counter, logKey string, acct account) (string, error) {
	if acct.Position == "" || acct.Position == "0-0" {
		return "0-0", nil
	}
	if keeper, ok := d.logs.(originKeeper); ok && acct.logOrigin != "" {
		_, origin, err := keeper.ReadCreditsOrigin(ctx, counter, logKey, acct.Position, 1, "")
		if err == nil && origin == "" {
			// The log of a Redis an earlier release kept one identity
			// for (readOrigin).
			origin, err = keeper.LegacyCreditsOrigin(ctx, d.cfg.Prefix)
		}
		if err != nil {
			return "", fmt.Errorf("credits: region's log start: %w", err)
		}
		if origin == acct.logOrigin {
			return acct.Position, nil
		}
		return "0-0", nil
	}
	read, err := d.logs.ReadCredits(ctx, counter, logKey, acct.Position, 1)
	if err != nil {
		return "", err
	}
	if read.Present {
		return acct.Position, nil
	}
	return "0-0", nil
}

// lockRegion takes the region's drain lock (a Postgres advisory lock on a
// connection of its own) if no other drainer holds it.
func (d *Drainer) lockRegion(ctx context.Context) (unlock func(), ok bool, err error) {
	conn, err := d.db.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("credits: region lock: %w", err)
	}
	const lock = `SELECT pg_try_advisory_lock(hashtext('tollgate credits drain'), hashtext($1))`
	if err := conn.QueryRow(ctx, lock, d.cfg.Region).Scan(&ok); err != nil || !ok {
		conn.Release()
		if err != nil {
			err = fmt.Errorf("credits: region lock: %w", err)
		}
		return nil, false, err
	}
	return func() {
		// A failed unlock closes the connection, which releases the lock.
		if _, err := conn.Exec(context.Background(), `SELECT pg_advisory_unlock(hashtext('tollgate credits drain'), hashtext($1))`,
			d.cfg.Region); err != nil {
			conn.Conn().Close(context.Background()) //nolint:errcheck // closing is the fallback
		}
		conn.Release()
	}, true, nil
}

// drainRegion is drainTenant in a region: it records one batch of the
// region's log of tenantID's balance and, once the log is recorded,
// repairs the counter (counted − escrow), moves the region's escrow
// toward its target and sets when it lapses.
func (d *Drainer) drainRegion(ctx context.Context, tenantID string) (r Report, more bool, err error) {
	counter, logKey := Keys(d.cfg.Prefix, tenantID)
	var through string
	var reserve int64
	err = postgres.Tx(ctx, d.db, func(tx pgx.Tx) error {
		r, through, more, reserve = Report{}, "", false, 0
		s, b, settings, overdraft, err := openDrain(ctx, tx, tenantID)
		if err != nil {
			return err
		}
		reg, err := s.regionRows(ctx, tenantID, d.cfg.Region)
		if err != nil {
			return err
		}
		own := reg.own
		if reg.added {
			// The region's first drain of the balance only places its
			// log's start, and commits it before anything in Redis
			// moves: for an account without an identity, a counter
			// rebuilt by a drain that then failed would make a new
			// Redis look like the one the account's position came from.
			if own.Position, err = d.logStart(ctx, counter, logKey, b.acct); err != nil {
				return err
			}
			more = true
			return s.saveRegionRow(ctx, tenantID, own)
		}
		before, beforeOwn := b.acct, *own
		read, err := d.logs.ReadCredits(ctx, counter, logKey, own.Position, d.cfg.Batch)
		if err != nil {
			return err
		}
		var demand int64
		for _, e := range read.Entries {
			if err := d.record(ctx, s, b, overdraft, reg, own.Region, e, &r); err != nil {
				return err
			}
			demand += max(0, e.Units) + max(0, e.Overage) + max(0, e.Unpaid)
		}
		if own.held() == 0 {
			demand *= 2 // it drew all it held: it wanted more
		}
		if len(read.Entries) > 0 {
			through = read.Entries[len(read.Entries)-1].ID
		}
		r.Entries = len(read.Entries)
		more = len(read.Entries) == d.cfg.Batch
		now := time.UnixMicro(read.NowUS).UTC()
		if d.cfg.Now != nil {
			now = d.cfg.Now()
		}
		if !more {
			own.Demand, own.ThroughUS = demand, read.NowUS
			expired, err := b.expireDue(ctx, reg.expiryAt(now))
			if err != nil {
				return err
			}
			r.Expired += len(expired)
			want, present := own.Counted-own.Escrow, read.Present
			switch {
			case !present:
				made, err := d.logs.RebuildCredits(ctx, counter, logKey, own.Position, want)
				if err != nil {
					return err
				}
				if made {
					r.Rebuilt++
				}
				more, present = !made, made
			case read.Consumed != want:
				drift := read.Consumed - want
				r.Drift = max(drift, -drift)
				d.cfg.Log.WarnContext(ctx, "credits: region's counter drifted from the ledger; repaired", "tenant_id", tenantID,
					"region", own.Region, "counter", read.Consumed, "ledger", want)
				if err := d.logs.AdjustCredits(ctx, counter, -drift); err != nil {
					return err
				}
			}
			lapse, expiring, err := b.lapse(ctx, now.Add(d.cfg.Margin))
			if err != nil {
				return err
			}
			own.LapseAt = lapse
			usable := b.acct.Balance() + overdraft - expiring
			deny := settings != nil && settings.Mode == ModeDeny
			if reserve, err = d.balanceEscrow(ctx, reg, counter, present, usable, deny); err != nil {
				return err
			}
			r.Held = own.held()
		}
		if err := d.notify(ctx, tx, settings, b, now); err != nil {
			return err
		}
		if own.changed(beforeOwn) {
			if err := s.saveRegionRow(ctx, tenantID, own); err != nil {
				return err
			}
		}
		if b.acct == before {
			return nil
		}
		return b.save(ctx)
	})
	if err == nil && reserve > 0 {
		// Reserved in the ledger: now the region may draw it. A failure
		// here leaves it to the next drain's repair.
		if aerr := d.logs.AdjustCredits(ctx, counter, -reserve); aerr != nil {
			d.cfg.Log.WarnContext(ctx, "credits: reserve escrow", "tenant_id", tenantID, "region", d.cfg.Region, "err", aerr)
		}
	}
	if err == nil && through != "" {
		if terr := d.logs.TrimCredits(ctx, logKey, through); terr != nil {
			d.cfg.Log.WarnContext(ctx, "credits: trim log", "tenant_id", tenantID, "err", terr)
		}
	}
	return r, more, err
}
