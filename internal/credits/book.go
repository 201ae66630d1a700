package credits

import (
	"context"
	"time"
)

// book moves units of one locked account, on a transaction: every ledger
// row is written here, with the balance after it, and the account's
// grants and debt follow so that the ledger balance (line − consumed) is
// always the live grants' remaining units less the debt.
type book struct {
	store *Store
	acct  account
	// grants are the live grants in draw order (read on first use).
	grants []Grant
	loaded bool
	// dated, when set, is the time the rows take and giveBack write are
	// dated at, when that is not the time they move the grants at: the
	// opening of a hold whose settlement they record (statements count a
	// hold's units in its request's month).
	dated time.Time
	// late lists what is recorded for closed months (the drainer's; nil
	// elsewhere).
	late *lateLog
}

func (s *Store) openBook(ctx context.Context, tenantID string) (*book, error) {
	a, err := s.lockAccount(ctx, tenantID)
	if err != nil {
		return nil, err
	}
	return &book{store: s, acct: a}, nil
}

func (b *book) live(ctx context.Context) ([]Grant, error) {
	if !b.loaded {
		g, err := b.store.liveGrants(ctx, b.acct.TenantID)
		if err != nil {
			return nil, err
		}
		b.grants, b.loaded = g, true
	}
	return b.grants, nil
}

// write appends a ledger row of units (already applied to the account).
func (b *book) write(ctx context.Context, kind string, units int64, grantID *string, cause string, logEntry *string, at time.Time) error {
	if !b.dated.IsZero() {
		at = b.dated
	}
	return b.store.appendEntry(ctx, Entry{TenantID: b.acct.TenantID, Kind: kind, Units: units, Balance: b.acct.Balance(),
		GrantID: grantID, Cause: cause, LogEntry: logEntry, At: at})
}

// grant credits g (Remaining unset) to the account: it first pays the
// debt, then adds to the balance.
func (b *book) grant(ctx context.Context, g Grant, kind string) (Grant, error) {
	paid := min(g.Amount, b.acct.Debt)
	b.acct.Debt -= paid
	g.Remaining = g.Amount - paid
	g.TenantID = b.acct.TenantID
	g, err := b.store.insertGrant(ctx, g)
	if err != nil {
		return g, err
	}
	if b.loaded {
		b.loaded = false // reread in draw order when needed
	}
	b.acct.Line += g.Amount
	return g, b.write(ctx, kind, g.Amount, &g.ID, g.Cause, nil, g.CreatedAt)
}

// take draws units on the live grants soonest-expiring first, the rest
// as debt, writing one row of kind per grant drawn (and one for the
// debt). onLine is true for an adjustment (the line moves), false for
// consumption (consumed moves).
func (b *book) take(ctx context.Context, kind string, units int64, onLine bool, cause string, logEntry *string, at time.Time) error {
	grants, err := b.live(ctx)
	if err != nil {
		return err
	}
	move := func(n int64, grantID *string) error {
		if onLine {
			b.acct.Line -= n
		} else {
			b.acct.Consumed += n
		}
		return b.write(ctx, kind, -n, grantID, cause, logEntry, at)
	}
	for i := range grants {
		g := &grants[i]
		if units == 0 {
			break
		}
		if g.Remaining == 0 || g.ExpiresAt != nil && !g.ExpiresAt.After(at) {
			continue
		}
		n := min(units, g.Remaining)
		g.Remaining -= n
		units -= n
		if err := b.store.saveGrant(ctx, *g); err != nil {
			return err
		}
		if err := move(n, &g.ID); err != nil {
			return err
		}
	}
	if units > 0 {
		b.acct.Debt += units
		return move(units, nil)
	}
	return nil
}

// refundMargin is how long before its expiry a grant takes no units given
// back: the drainer's margin (DrainerConfig.Margin's default). Units given
// back count on the check path at once (the counter went down when the
// hold was settled), but the check path learns that they belong to an
// expiring grant only once the drainer has recorded them and the snapshot
// reloaded, about a second later; until then its expiry of that grant
// takes off only what the grant had before. Were the grant to expire in
// between, checks would draw the units while the ledger expired them,
// and book the draws as debt past the overdraft.
const refundMargin = 5 * time.Second

// drawnFrom is what a draw took from one grant (GrantID nil: as debt).
type drawnFrom struct {
	GrantID *string
	Units   int64
}

// lapses reports whether units given back to g at at would outlive it:
// it has expired, or expires within refundMargin.
func lapses(g *Grant, at time.Time) bool {
	return g == nil || g.ExpiresAt != nil && !g.ExpiresAt.After(at.Add(refundMargin))
}

// giveBack returns units to the account: the debt first; then, of the
// draw they are given back from (from, in draw order; nil when unknown,
// as for an adjustment), the units it took from grants that have expired
// since or expire within refundMargin of at, taken as given back in the
// reverse of draw order, expire at once (an expiry row each, on the
// grant drawn): given back to the balance they would outlive the grant
// they were bought with. The rest returns to the live grants in the
// reverse of draw order (last-expiring first) up to their amounts,
// except grants that expire within refundMargin of at, and what is left
// as a new grant that never expires (units drawn on grants that never
// expire, whose room was taken since). onLine as for take. One row of
// kind records the units given back. It returns the units expired.
func (b *book) giveBack(ctx context.Context, kind string, units int64, onLine bool, cause string, logEntry *string, at time.Time, from []drawnFrom) (int64, error) {
	paid := min(units, b.acct.Debt)
	b.acct.Debt -= paid
	rest := units - paid
	grants, err := b.live(ctx)
	if err != nil {
		return 0, err
	}
	byID := make(map[string]*Grant, len(grants))
	for i := range grants {
		byID[grants[i].ID] = &grants[i]
	}
	var lapsed []drawnFrom
	var expired int64
	// All units given back, the debt's among them, are taken from the
	// draws in reverse: the draws past the balance (no grant) came last,
	// and what repaid the debt is theirs.
	for i, left := len(from)-1, units; i >= 0 && left > 0 && rest > 0; i-- {
		f := from[i]
		n := min(left, f.Units)
		left -= n
		if n <= 0 || f.GrantID == nil || !lapses(byID[*f.GrantID], at) {
			continue
		}
		n = min(n, rest)
		lapsed = append(lapsed, drawnFrom{GrantID: f.GrantID, Units: n})
		expired += n
		rest -= n
	}
	var into *string
	for i := len(grants) - 1; i >= 0 && rest > 0; i-- {
		g := &grants[i]
		if lapses(g, at) || g.Remaining == g.Amount {
			continue
		}
		n := min(rest, g.Amount-g.Remaining)
		g.Remaining += n
		rest -= n
		into = &g.ID
		if err := b.store.saveGrant(ctx, *g); err != nil {
			return 0, err
		}
	}
	if rest > 0 {
		g, err := b.store.insertGrant(ctx, Grant{TenantID: b.acct.TenantID, Amount: rest, Remaining: rest, Cause: cause, CreatedAt: at})
		if err != nil {
			return 0, err
		}
		into = &g.ID
		b.loaded = false
	}
	if onLine {
		b.acct.Line += units
	} else {
		b.acct.Consumed -= units
	}
	if err := b.write(ctx, kind, units, into, cause, logEntry, at); err != nil {
		return 0, err
	}
	// The lapse is dated when it happens, not at a hold's opening: the
	// grant expired after it.
	dated := b.dated
	b.dated = time.Time{}
	defer func() { b.dated = dated }()
	for _, l := range lapsed {
		b.acct.Line -= l.Units
		if err := b.write(ctx, KindExpiry, -l.Units, l.GrantID, "expired at once: "+cause+" from a grant that expired", nil, at); err != nil {
			return 0, err
		}
	}
	return expired, nil
}

// expireDue expires the live grants whose expiry is at or before at: each
// one's remaining units leave the line, with an expiry row. It returns
// the grants expired.
func (b *book) expireDue(ctx context.Context, at time.Time) ([]Grant, error) {
	grants, err := b.live(ctx)
	if err != nil {
		return nil, err
	}
	var expired []Grant
	keep := grants[:0]
	for _, g := range grants {
		if g.ExpiresAt == nil || g.ExpiresAt.After(at) {
			keep = append(keep, g)
			continue
		}
		left := g.Remaining
		when := *g.ExpiresAt
		g.Remaining, g.ExpiredAt = 0, &when
		if err := b.store.saveGrant(ctx, g); err != nil {
			return nil, err
		}
		b.acct.Line -= left
		if err := b.write(ctx, KindExpiry, -left, &g.ID, "grant expired", nil, when); err != nil {
			return nil, err
		}
		if err := b.late.note(ctx, b.acct.TenantID, nil, when, Late{Expired: left}); err != nil {
			return nil, err
		}
		expired = append(expired, g)
	}
	b.grants = keep
	return expired, nil
}

func (b *book) save(ctx context.Context) error { return b.store.saveAccount(ctx, b.acct) }
