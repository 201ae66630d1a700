package credits_test

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/demo"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
	"github.com/tollgate/tollgate/internal/usage"
)

// rig is a tenant on a credit plan, checked through the real checker on
// Redis and drained into the ledger on Postgres.
type rig struct {
	t        *testing.T
	db       *pgxpool.Pool
	rdb      *redis.Client
	prefix   string
	tenantID string
	key      string
	planID   int64
	ops      *credits.Ops
	holder   *snapshot.Holder
	checker  *enforce.Checker
	drainer  *credits.Drainer
	// drainAt is the drainer's clock.
	drainAt time.Time
}

func newRig(t *testing.T, mode credits.Mode, overdraft, low int64) *rig {
	t.Helper()
	ctx := context.Background()
	r := &rig{t: t, db: testenv.DB(t), drainAt: time.Now()}
	r.rdb, r.prefix = testenv.Redis(t)
	p, err := plans.NewStore(r.db).Put(ctx, plans.Plan{Name: "prepaid", Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1_000_000, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	r.planID = p.ID
	r.ops = credits.NewOps(r.db, nil)
	_, err = r.ops.SetPlan(ctx, audit.CLI, p.ID, credits.PlanSettingsInput{Mode: mode, Overdraft: overdraft, LowThreshold: low})
	testenv.Must(t, err)
	ts := tenants.NewStore(r.db)
	tn, err := ts.Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	r.tenantID = tn.ID
	r.key, _, err = ts.IssueKey(ctx, tn.ID, "", nil)
	testenv.Must(t, err)
	r.holder = snapshot.NewHolder(snapshot.NewPostgresSource(r.db), slog.New(slog.DiscardHandler))
	store := redisstore.New(r.rdb)
	r.checker = enforce.NewChecker(r.holder, store, enforce.CheckerConfig{Prefix: r.prefix, NoLocalDenials: true})
	t.Cleanup(r.checker.Close)
	r.drainer = credits.NewDrainer(r.db, store, credits.DrainerConfig{Prefix: r.prefix, Now: func() time.Time { return r.drainAt }})
	r.reload()
	// The drainer makes the balance's counter (from the ledger): until
	// then checks draw nothing on it.
	if rep := r.drain(); rep.Rebuilt != 1 {
		t.Fatalf("first drain: %+v, want the counter made", rep)
	}
	return r
}

func (r *rig) reload() {
	r.t.Helper()
	testenv.Must(r.t, r.holder.Reload(context.Background()))
}

func (r *rig) grant(amount int64, expires time.Duration, priority int) credits.Grant {
	r.t.Helper()
	in := credits.GrantInput{Amount: amount, Priority: priority, Cause: "test"}
	if expires > 0 {
		at := time.Now().Add(expires)
		in.ExpiresAt = &at
	}
	g, err := r.ops.Grant(context.Background(), audit.CLI, r.tenantID, in)
	testenv.Must(r.t, err)
	return g
}

// topUp grants amount units that never expire and reloads the snapshot.
func (r *rig) topUp(amount int64) {
	r.t.Helper()
	r.grant(amount, 0, 0)
	r.reload()
}

// loseBalance deletes the tenant's balance counter and its log from
// Redis, as a restart without persistence loses them, and returns their
// keys.
func (r *rig) loseBalance() (counter, log string) {
	r.t.Helper()
	counter, log = credits.Keys(r.prefix, r.tenantID)
	testenv.Must(r.t, r.rdb.Del(context.Background(), counter, log).Err())
	return counter, log
}

// events counts the tenant's events of typ.
func (r *rig) events(typ string) int {
	r.t.Helper()
	var n int
	testenv.Must(r.t, r.db.QueryRow(context.Background(), `SELECT count(*) FROM events WHERE type = $1 AND tenant_id = $2`, typ, r.tenantID).Scan(&n))
	return n
}

func (r *rig) check(cost int64) enforce.Decision {
	r.t.Helper()
	d, err := r.checker.Check(context.Background(), enforce.Request{Key: r.key, Cost: cost, Resource: "GET /x"})
	testenv.Must(r.t, err)
	return d
}

func (r *rig) drain() credits.Report {
	r.t.Helper()
	rep, err := r.drainer.Drain(context.Background())
	testenv.Must(r.t, err)
	return rep
}

// agree drains and checks that the ledger, the account and the hot-path
// counter agree: drift 0, the ledger's rows add up to the balance, and
// every grant's remaining units less the debt are the balance.
func (r *rig) agree() credits.Account {
	r.t.Helper()
	ctx := context.Background()
	if rep := r.drain(); rep.Drift != 0 {
		r.t.Errorf("drift %d after draining", rep.Drift)
	}
	if rep := r.drain(); rep.Drift != 0 || rep.Entries != 0 {
		r.t.Errorf("a second drain found %+v", rep)
	}
	acct, err := credits.NewStore(r.db).Account(ctx, r.tenantID)
	testenv.Must(r.t, err)
	var sum, remaining int64
	testenv.Must(r.t, r.db.QueryRow(ctx, `SELECT coalesce(sum(units), 0) FROM credit_ledger WHERE tenant_id = $1`, r.tenantID).Scan(&sum))
	testenv.Must(r.t, r.db.QueryRow(ctx, `SELECT coalesce(sum(remaining), 0) FROM credit_grants WHERE tenant_id = $1`, r.tenantID).Scan(&remaining))
	counter, _ := credits.Keys(r.prefix, r.tenantID)
	hot, err := r.rdb.Get(ctx, counter).Int64()
	testenv.Must(r.t, err)
	if sum != acct.Balance() || remaining-acct.Debt != acct.Balance() || hot != acct.Consumed {
		r.t.Errorf("ledger sum %d, grants %d − debt %d, account balance %d; counter %d, ledger consumed %d",
			sum, remaining, acct.Debt, acct.Balance(), hot, acct.Consumed)
	}
	return acct
}

func ledger(t *testing.T, db *pgxpool.Pool, tenantID string) []credits.Entry {
	t.Helper()
	p, err := credits.NewStore(db).Ledger(context.Background(), tenantID, credits.LedgerFilter{}, page.First(page.MaxLimit))
	testenv.Must(t, err)
	return p.Items
}

// TestDrawsSoonestExpiringFirstAndExpires: consumption draws on the grant
// that expires first (priority among equal expiries), the rest of an
// expired grant leaves the balance through an expiry row, and the check
// path stops counting it when it expires.
func TestDrawsSoonestExpiringFirstAndExpires(t *testing.T) {
	r := newRig(t, credits.ModeDeny, 0, 0)
	emptyAtStart := r.events(credits.EventExhausted) // the new account's balance of 0
	never := r.grant(5, 0, 0)
	late := r.grant(10, 2*time.Hour, 0)
	soonLow := r.grant(2, time.Hour, 0)
	soonHigh := r.grant(2, time.Hour, 1)
	soonHigh.ExpiresAt = soonLow.ExpiresAt
	r.reload()
	if d := r.check(5); !d.Allowed || d.Credits == nil || d.Credits.Balance != 14 || d.Credits.Drawn != 5 {
		t.Fatalf("check of 5 on 19: %+v", d)
	}
	r.agree()
	grants, err := credits.NewStore(r.db).Grants(context.Background(), r.tenantID)
	testenv.Must(t, err)
	left := map[string]int64{}
	for _, g := range grants {
		left[g.ID] = g.Remaining
	}
	if left[soonHigh.ID] != 0 || left[soonLow.ID] != 0 || left[late.ID] != 9 || left[never.ID] != 5 {
		t.Errorf("remaining after drawing 5: %v; want the two soonest (2, 2) empty, then 1 of the 10", left)
	}

	// Three hours on, the 10 expired with 9 left.
	r.drainAt = time.Now().Add(3 * time.Hour)
	acct := r.agree()
	if acct.Balance() != 5 {
		t.Errorf("balance after expiry %d, want 5", acct.Balance())
	}
	rows := ledger(t, r.db, r.tenantID)
	var expired int64
	for _, e := range rows {
		if e.Kind == credits.KindExpiry {
			expired -= e.Units
		}
	}
	if expired != 9 {
		t.Errorf("expiry rows total %d, want 9", expired)
	}
	r.reload()
	if d := r.check(6); d.Allowed || d.Reason != tollgate.ReasonCreditsExhausted || d.RetryAfterMS != -1 {
		t.Errorf("check of 6 on 5: %+v, want credits_exhausted", d)
	}
	if d := r.check(5); !d.Allowed || d.Credits.Balance != 0 {
		t.Errorf("check of 5 on 5: %+v", d)
	}
	r.agree()
	if exhausted := r.events(credits.EventExhausted) - emptyAtStart; exhausted != 1 {
		t.Errorf("%d credits.exhausted events since the grants, want 1", exhausted)
	}
}

// TestLineStopsCountingAtExpiryBeforeTheLedger: between a grant's expiry
// and the drainer's record of it, checks no longer draw on it; past
// limiter.MaxCreditExpiries, the later grants stop counting at the first
// of them (early, never late).
func TestLineStopsCountingAtExpiryBeforeTheLedger(t *testing.T) {
	hot := &credits.Hot{Line: 15, Expiring: []credits.Expiring{{AtUS: 100, Remaining: 4}, {AtUS: 200, Remaining: 6}}}
	lc := hot.Limiter("c", "l")
	for _, tc := range []struct{ now, want int64 }{{99, 15}, {100, 11}, {199, 11}, {200, 5}} {
		if got := lc.LineAt(tc.now); got != tc.want {
			t.Errorf("LineAt(%d) = %d, want %d", tc.now, got, tc.want)
		}
	}
	many := &credits.Hot{Line: 100}
	for i := range 8 {
		many.Expiring = append(many.Expiring, credits.Expiring{AtUS: int64(100 * (i + 1)), Remaining: 10})
	}
	many.Prepare()
	lc = many.Limiter("c", "l")
	if len(lc.Expiring) != limiter.MaxCreditExpiries {
		t.Fatalf("%d expiries carried, want %d", len(lc.Expiring), limiter.MaxCreditExpiries)
	}
	for _, tc := range []struct{ now, want int64 }{{400, 60}, {499, 60}, {500, 20}, {800, 20}} {
		if got := lc.LineAt(tc.now); got != tc.want {
			t.Errorf("eight grants: LineAt(%d) = %d, want %d", tc.now, got, tc.want)
		}
	}
}

// TestCounterLostWithRedisIsRebuiltBeforeAnyDraw: Redis loses the counter
// and the log (a restart without persistence) while the api's snapshot
// still holds the consumption of long ago. No check may draw on that
// stale figure: until the drainer has made the counter from the ledger, a
// deny-mode check is answered unavailable (degraded) and draws nothing;
// then checks draw on the ledger's balance, and the ledger and the
// counter agree without drift.
func TestCounterLostWithRedisIsRebuiltBeforeAnyDraw(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(100)
	r.check(30)
	r.agree()
	r.check(10)
	r.agree() // the ledger says 40 consumed; the snapshot still 0
	counter, log := r.loseBalance()

	d := r.check(5)
	if d.Allowed || d.Reason != tollgate.ReasonUnavailable || !d.Degraded || d.Credits != nil || d.RetryAfterMS != 1000 {
		t.Fatalf("check on the lost balance: %+v, want unavailable, degraded, no balance", d)
	}
	if n, err := r.rdb.Exists(ctx, counter, log).Result(); err != nil || n != 0 {
		t.Fatalf("the refused check left %d keys (%v)", n, err)
	}
	if rep := r.drain(); rep.Rebuilt != 1 || rep.Drift != 0 {
		t.Errorf("drain after the loss: %+v, want the counter made from the ledger", rep)
	}
	if d := r.check(5); !d.Allowed || d.Degraded || d.Credits.Balance != 55 {
		t.Fatalf("check after the rebuild: %+v (credits %+v), want 55 left", d, d.Credits)
	}
	if acct := r.agree(); acct.Balance() != 55 {
		t.Errorf("balance %d, want 55", acct.Balance())
	}
	if d := r.check(56); d.Allowed {
		t.Errorf("check of 56 on 55 admitted: %+v", d)
	}
}

// TestDeferredDrawsAfterALossInOverageMode: in overage mode a check on a
// lost balance is admitted (degraded) and its units logged deferred; the
// drainer draws what the ledger's balance allows of them, down to
// −overdraft, bills the rest as overage, and only then makes the counter.
func TestDeferredDrawsAfterALossInOverageMode(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeOverage, 2, 0)
	r.topUp(10)
	r.check(8)
	r.agree()
	r.loseBalance()
	d := r.check(5)
	if !d.Allowed || !d.Degraded || d.Credits != nil {
		t.Fatalf("overage check on the lost balance: %+v, want admitted, degraded", d)
	}
	if rep := r.drain(); rep.Entries != 1 || rep.Rebuilt != 1 {
		t.Errorf("drain: %+v, want the deferred entry recorded and the counter made", rep)
	}
	acct := r.agree()
	if acct.Balance() != -2 || acct.Consumed != 12 {
		t.Errorf("ledger balance %d, consumed %d; want −2 (4 of the 5 drawn) and 12", acct.Balance(), acct.Consumed)
	}
	m, err := credits.NewStore(r.db).Month(ctx, r.tenantID, usage.MonthOf(time.Now()).Start())
	testenv.Must(t, err)
	if m.Overage != 1 || m.Used != 12 {
		t.Errorf("month %+v, want 12 used and 1 overage", m)
	}
	if d := r.check(1); !d.Allowed || d.Credits.Overage != 1 || d.Credits.Balance != -2 {
		t.Errorf("check after the rebuild: %+v", d.Credits)
	}
}

// TestARedisBackEmptyWithItsClockBehindDrawsTheBalanceOnce: Redis comes
// back empty on a machine whose clock is an hour behind the one before,
// so the new log's IDs sort before the ledger's position, and one of them
// is even the ID of an entry the ledger recorded from the old log. The
// drainer tells the new Redis by its identity and reads its log from the
// beginning: each of its draws is recorded once, none is given back to
// the counter by the drift repair, and the tenant spends its balance
// exactly.
func TestARedisBackEmptyWithItsClockBehindDrawsTheBalanceOnce(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(20)
	r.admitted(5)
	counter, logKey := credits.Keys(r.prefix, r.tenantID)
	old, err := r.rdb.XRange(ctx, logKey, "-", "+").Result()
	testenv.Must(t, err)
	if len(old) != 5 {
		t.Fatalf("the log holds %d entries, want 5", len(old))
	}
	// The old Redis's clock an hour ahead: a draw of 1 logged by it.
	ahead := r.loggedAt(time.Now().Add(time.Hour).UnixMilli())
	r.drain()
	if acct, err := credits.NewStore(r.db).Account(ctx, r.tenantID); err != nil || acct.Position != ahead || acct.Consumed != 6 {
		t.Fatalf("account %+v, %v: want 6 consumed through %s", acct, err, ahead)
	}

	r.emptyRedis()
	if d := r.check(1); d.Allowed {
		t.Fatalf("check on the emptied Redis: %+v, want unavailable until the counter is made", d)
	}
	if rep := r.drain(); rep.Rebuilt != 1 {
		t.Fatalf("drain of the emptied Redis: %+v, want the counter made", rep)
	}
	// A draw the new Redis logs under an ID the old one used, as a clock
	// that far behind may.
	testenv.Must(t, r.rdb.XAdd(ctx, &redis.XAddArgs{Stream: logKey, ID: old[0].ID,
		Values: []any{"u", "1", "t", strconv.FormatInt(time.Now().UnixMicro(), 10)}}).Err())
	testenv.Must(t, r.rdb.IncrBy(ctx, counter, 1).Err())
	admitted := int64(1)
	for i := range 40 {
		if d := r.check(1); d.Allowed {
			admitted++
		}
		if i%5 == 4 {
			r.drain()
		}
	}
	if admitted != 14 {
		t.Errorf("the new Redis admitted %d units, want 14: the balance of 20 less the 6 drawn before", admitted)
	}
	acct := r.agree()
	if acct.Consumed != 20 || acct.Balance() != 0 {
		t.Errorf("ledger consumed %d, balance %d; want 20 and 0", acct.Consumed, acct.Balance())
	}
	var rows, entries, units int64
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT count(*), count(DISTINCT entry), coalesce(-sum(units), 0) FROM credit_ledger
		WHERE tenant_id = $1 AND kind = 'consumption'`, r.tenantID).Scan(&rows, &entries, &units))
	if rows != 20 || entries != 20 || units != 20 {
		t.Errorf("consumption in the ledger: %d rows of %d entries, %d units; want 20 of 20, 20 units: each draw once", rows, entries, units)
	}
}

// staleOrigin is the Redis store as a drainer sees it whose pass began
// before that Redis replaced another: the first identity it offers is
// the one of the Redis gone.
type staleOrigin struct {
	*redisstore.Store
	read bool
}

func (s *staleOrigin) ReadCreditsOrigin(ctx context.Context, key, log, after string, max int, id string) (limiter.CreditRead, string, error) {
	if !s.read {
		s.read, id = true, "gone"
	}
	return s.Store.ReadCreditsOrigin(ctx, key, log, after, max, id)
}

// emptiedMidPass is the Redis store whose Redis comes back empty
// part-way through a drainer's pass: just before it reads the log at log
// (beforeRead), or just before it trims it (beforeTrim), each once. The
// hook empties Redis and logs the new Redis's first draws.
type emptiedMidPass struct {
	*redisstore.Store
	log                    string
	beforeRead, beforeTrim func()
}

func once(hook *func()) {
	if *hook != nil {
		(*hook)()
		*hook = nil
	}
}

func (s *emptiedMidPass) ReadCreditsOrigin(ctx context.Context, key, log, after string, max int, id string) (limiter.CreditRead, string, error) {
	if log == s.log {
		once(&s.beforeRead)
	}
	return s.Store.ReadCreditsOrigin(ctx, key, log, after, max, id)
}

func (s *emptiedMidPass) TrimCreditsOrigin(ctx context.Context, log, through, origin string) error {
	if log == s.log {
		once(&s.beforeTrim)
	}
	return s.Store.TrimCreditsOrigin(ctx, log, through, origin)
}

// refill returns a hook that empties the rig's Redis and logs a deferred
// draw of 1 under each of ids in the balance's new log.
func (r *rig) refill(ids ...string) func() {
	return func() {
		ctx := context.Background()
		_, logKey := credits.Keys(r.prefix, r.tenantID)
		r.emptyRedis()
		now := strconv.FormatInt(time.Now().UnixMicro(), 10)
		for _, id := range ids {
			testenv.Must(r.t, r.rdb.XAdd(ctx, &redis.XAddArgs{Stream: logKey, ID: id,
				Values: []any{"u", "1", "d", "1", "t", now}}).Err())
		}
	}
}

// recordedOnce checks that each of the log entries ids is in the ledger
// once, under whichever identity.
func (r *rig) recordedOnce(ids ...string) {
	r.t.Helper()
	for _, id := range ids {
		var rows int
		testenv.Must(r.t, r.db.QueryRow(context.Background(), `SELECT count(*) FROM credit_ledger
			WHERE tenant_id = $1 AND kind = 'consumption' AND entry LIKE '%:' || $2`, r.tenantID, id).Scan(&rows))
		if rows != 1 {
			r.t.Errorf("the new log's entry %s is in the ledger %d times, want once", id, rows)
		}
	}
}

// TestARedisEmptiedPartWayThroughAPassLosesNoDraw: Redis comes back
// empty after a drainer's pass began, on a machine whose clock is behind
// the old one's, and before the pass reads a balance the old Redis had
// logged. The new log's first draws (deferred, its counter missing) sort
// before the account's position, a later one after it. The drainer takes
// the log for the new Redis's by the identity read with it: it reads
// the log from its beginning, records each draw once under the new
// identity, and trims nothing it has not read.
func TestARedisEmptiedPartWayThroughAPassLosesNoDraw(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeOverage, 0, 0)
	r.topUp(20)
	r.admitted(3)
	_, logKey := credits.Keys(r.prefix, r.tenantID)
	// The old Redis's clock an hour ahead: a draw of 1 logged by it.
	aheadMS := time.Now().Add(time.Hour).UnixMilli()
	ahead := r.loggedAt(aheadMS)
	r.drain()
	if acct, err := credits.NewStore(r.db).Account(ctx, r.tenantID); err != nil || acct.Position != ahead || acct.Consumed != 4 {
		t.Fatalf("account %+v, %v: want 4 consumed through %s", acct, err, ahead)
	}

	behind := time.Now().Add(-time.Minute).UnixMilli()
	fresh := []string{fmt.Sprintf("%d-0", behind), fmt.Sprintf("%d-1", behind), fmt.Sprintf("%d-0", aheadMS+1000)}
	store := &emptiedMidPass{Store: redisstore.New(r.rdb), log: logKey, beforeRead: r.refill(fresh...)}
	pass := credits.NewDrainer(r.db, store, credits.DrainerConfig{Prefix: r.prefix, Now: func() time.Time { return r.drainAt }})
	if _, err := pass.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if store.beforeRead != nil {
		t.Fatal("the pass never read the balance's log")
	}
	acct := r.agree()
	if acct.Consumed != 7 {
		t.Errorf("ledger consumed %d, want 7: the 4 of the old Redis and the new one's 3", acct.Consumed)
	}
	r.recordedOnce(fresh...)
}

// TestARedisEmptiedBeforeATrimKeepsItsLog: Redis comes back empty, its
// clock behind the old one's, between a drain's commit and its trim of
// the log it recorded. The new log's first draws sort before the entry
// the trim is through: the trim leaves them, since the log no longer
// carries the identity its entries were recorded under, and the next
// drain records each once.
func TestARedisEmptiedBeforeATrimKeepsItsLog(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeOverage, 0, 0)
	r.topUp(20)
	r.admitted(3)
	_, logKey := credits.Keys(r.prefix, r.tenantID)
	r.loggedAt(time.Now().Add(time.Hour).UnixMilli()) // the old Redis's clock an hour ahead

	behind := time.Now().Add(-time.Minute).UnixMilli()
	fresh := []string{fmt.Sprintf("%d-0", behind), fmt.Sprintf("%d-1", behind)}
	store := &emptiedMidPass{Store: redisstore.New(r.rdb), log: logKey, beforeTrim: r.refill(fresh...)}
	pass := credits.NewDrainer(r.db, store, credits.DrainerConfig{Prefix: r.prefix, Now: func() time.Time { return r.drainAt }})
	rep, err := pass.Drain(ctx)
	testenv.Must(t, err)
	if rep.Entries != 4 || store.beforeTrim != nil {
		t.Fatalf("drain: %+v, trimmed: %v; want the 4 entries recorded, then the log trimmed", rep, store.beforeTrim == nil)
	}
	if n := r.rdb.XLen(ctx, logKey).Val(); n != 2 {
		t.Errorf("the new log holds %d entries after the trim, want its 2", n)
	}
	acct := r.agree()
	if acct.Consumed != 6 {
		t.Errorf("ledger consumed %d, want 6: the 4 of the old Redis and the new one's 2", acct.Consumed)
	}
	r.recordedOnce(fresh...)
}

// TestADrainerStillOnAGoneRedisRecordsNothingTwice: a drainer whose pass
// began on a Redis since replaced drains an account another drainer has
// already drained from the Redis now in place. It does not take the
// Redis for a new one: the log, whose recorded entries a failed trim
// left, is read after the account's position, and nothing is drawn
// twice.
func TestADrainerStillOnAGoneRedisRecordsNothingTwice(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(20)
	for range 3 {
		r.check(1)
	}
	r.drainUntrimmed()
	stale := credits.NewDrainer(r.db, &staleOrigin{Store: redisstore.New(r.rdb)}, credits.DrainerConfig{Prefix: r.prefix})
	rep, err := stale.Drain(ctx)
	testenv.Must(t, err)
	if rep.Entries != 0 {
		t.Errorf("the stale drainer recorded %d entries, want 0: all 3 were recorded", rep.Entries)
	}
	if acct := r.agree(); acct.Consumed != 3 {
		t.Errorf("ledger consumed %d, want 3", acct.Consumed)
	}
}

// admitted makes n checks of 1 on the balance, each admitted.
func (r *rig) admitted(n int) {
	r.t.Helper()
	for range n {
		if d := r.check(1); !d.Allowed {
			r.t.Fatalf("check on the balance: %+v", d)
		}
	}
}

// loggedAt appends a draw of 1 to the balance's log under the ID of the
// millisecond ms, as a Redis whose clock reads ms logs it, and adds it to
// the counter. It returns the entry's ID.
func (r *rig) loggedAt(ms int64) string {
	r.t.Helper()
	ctx := context.Background()
	counter, logKey := credits.Keys(r.prefix, r.tenantID)
	id := fmt.Sprintf("%d-0", ms)
	testenv.Must(r.t, r.rdb.XAdd(ctx, &redis.XAddArgs{Stream: logKey, ID: id,
		Values: []any{"u", "1", "t", strconv.FormatInt(time.Now().UnixMicro(), 10)}}).Err())
	testenv.Must(r.t, r.rdb.IncrBy(ctx, counter, 1).Err())
	return id
}

// emptyRedis deletes every key of the test's Redis, as a restart without
// persistence does (the test's prefix stands for the whole server).
func (r *rig) emptyRedis() {
	r.t.Helper()
	ctx := context.Background()
	iter := r.rdb.Scan(ctx, 0, r.prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		testenv.Must(r.t, r.rdb.Del(ctx, iter.Val()).Err())
	}
	testenv.Must(r.t, iter.Err())
}

// TestHoldSettledPastTheBalanceInDenyMode: a hold settled above its
// estimate takes the balance down to −overdraft and no further; the
// units past it are unpaid: on the month's statement, never drawn, never
// billed.
func TestHoldSettledPastTheBalanceInDenyMode(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 3, 0)
	r.topUp(20)
	d, err := r.checker.Check(ctx, enforce.Request{Key: r.key, Cost: 15, Resource: "GET /x", Hold: true})
	testenv.Must(t, err)
	if !d.Allowed || d.Credits.Balance != 5 {
		t.Fatalf("hold of 15 on 20: %+v", d)
	}
	if _, err := r.checker.Settle(ctx, d.HoldID, 40); err != nil {
		t.Fatal(err)
	}
	acct := r.agree()
	if acct.Balance() != -3 {
		t.Errorf("balance after settling 15 at 40 on 20 with an overdraft of 3: %d, want −3", acct.Balance())
	}
	m, err := credits.NewStore(r.db).Month(ctx, r.tenantID, usage.MonthOf(time.Now()).Start())
	testenv.Must(t, err)
	if m.Used != 23 || m.Unpaid != 17 || m.Overage != 0 {
		t.Errorf("month %+v, want 23 used, 17 unpaid, no overage", m)
	}
	if d := r.check(1); d.Allowed || d.Reason != tollgate.ReasonCreditsExhausted {
		t.Errorf("check at −overdraft: %+v, want credits_exhausted", d)
	}
}

// TestLedgerIsAppendOnly: rows can be added, never changed or removed.
func TestLedgerIsAppendOnly(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.grant(10, 0, 0)
	for _, sql := range []string{`UPDATE credit_ledger SET units = 1000`, `DELETE FROM credit_ledger`, `TRUNCATE credit_ledger`} {
		if _, err := r.db.Exec(ctx, sql); err == nil {
			t.Errorf("%s: succeeded", sql)
		}
	}
	if rows := ledger(t, r.db, r.tenantID); len(rows) != 1 || rows[0].Units != 10 {
		t.Errorf("ledger %+v", rows)
	}
}

// TestOverageAndOverdraft: in overage mode a check past the balance is
// admitted, draws down to −overdraft, and the rest is the month's
// overage; a top-up pays the debt first; the month shows granted, used,
// expired and overage.
func TestOverageAndOverdraft(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeOverage, 3, 4)
	r.topUp(10)
	d := r.check(15)
	if !d.Allowed || d.Credits.Drawn != 13 || d.Credits.Overage != 2 || d.Credits.Balance != -3 {
		t.Fatalf("check of 15 on 10+3: %+v", d)
	}
	acct := r.agree()
	if acct.Debt != 3 {
		t.Errorf("debt %d, want 3", acct.Debt)
	}
	g := r.grant(5, 0, 0)
	if g.Remaining != 2 {
		t.Errorf("a grant of 5 against a debt of 3 keeps %d, want 2", g.Remaining)
	}
	r.agree()
	start := time.Now().UTC()
	start = time.Date(start.Year(), start.Month(), 1, 0, 0, 0, 0, time.UTC)
	m, err := credits.NewStore(r.db).Month(ctx, r.tenantID, start)
	testenv.Must(t, err)
	if m != (credits.Month{Granted: 15, Used: 13, Overage: 2, Closing: 2}) {
		t.Errorf("month %+v", m)
	}
	if low := r.events(credits.EventLow); low != 1 {
		t.Errorf("%d credits.low events, want 1", low)
	}
}

// TestHoldsReserveAndSettleOnTheBalance: a hold's estimate is drawn at the
// check; settling below it gives the difference back, and the ledger
// records the refund.
func TestHoldsReserveAndSettleOnTheBalance(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(50)
	d, err := r.checker.Check(ctx, enforce.Request{Key: r.key, Cost: 40, Resource: "GET /x", Hold: true})
	testenv.Must(t, err)
	if !d.Allowed || d.HoldID == "" || d.Credits.Balance != 10 {
		t.Fatalf("hold of 40 on 50: %+v", d)
	}
	if d := r.check(11); d.Allowed {
		t.Errorf("check of 11 while 40 are held: admitted")
	}
	if _, err := r.checker.Settle(ctx, d.HoldID, 25); err != nil {
		t.Fatal(err)
	}
	acct := r.agree()
	if acct.Balance() != 25 {
		t.Errorf("balance after settling 40 at 25: %d, want 25", acct.Balance())
	}
	var refunds int64
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT coalesce(sum(units), 0) FROM credit_ledger WHERE kind = 'refund' AND tenant_id = $1`, r.tenantID).Scan(&refunds))
	if refunds != 15 {
		t.Errorf("refunds %d, want 15", refunds)
	}
}

// TestRefundSkipsAGrantAboutToExpire: a hold settled below its estimate
// gives units back to a later-expiring grant, never to a grant that
// expires within the drainer's margin: the units it drew on that grant
// expire at once (given back to a grant that never expires, they made
// expiring credits permanent). The check path counts the units given
// back at once, but its snapshot's expiry of that grant still holds what
// the grant had before the refund, until the drainer records it and the
// snapshot reloads: had the units gone into the grant, the check path
// would count them past its expiry, and the ledger, which expires them,
// would book what it drew as debt past the overdraft. Once the snapshot
// reloads, the check path's view of the balance after the expiry is the
// ledger's.
func TestRefundSkipsAGrantAboutToExpire(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	soon := r.grant(10, 3*time.Second, 0)
	later := r.grant(10, time.Hour, 0)
	r.reload()
	// 15 held: the 10 expiring soon, then 5 of the hour's.
	d, err := r.checker.Check(ctx, enforce.Request{Key: r.key, Cost: 15, Resource: "GET /x", Hold: true})
	testenv.Must(t, err)
	if !d.Allowed || d.Credits.Balance != 5 {
		t.Fatalf("hold of 15 on 20: %+v", d)
	}
	r.drain()
	r.reload() // the check path: the soon grant expires with 0 left
	if _, err := r.checker.Settle(ctx, d.HoldID, 7); err != nil {
		t.Fatal(err)
	}
	r.drain() // records the refund of 8: 5 to the hour's grant, 3 expired
	left := map[string]int64{}
	grants, err := credits.NewStore(r.db).Grants(ctx, r.tenantID)
	testenv.Must(t, err)
	var never int64
	for _, g := range grants {
		left[g.ID] = g.Remaining
		if g.ExpiresAt == nil {
			never += g.Remaining
		}
	}
	if left[soon.ID] != 0 || left[later.ID] != 10 || never != 0 {
		t.Errorf("after a refund of 8: %d left of the grant expiring soon, %d of the hour's, %d that never expire; want 0, 10, 0",
			left[soon.ID], left[later.ID], never)
	}

	// Past the soon grant's expiry.
	r.drainAt = soon.ExpiresAt.Add(time.Second)
	acct := r.agree()
	r.reload()
	fresh := r.holder.Current().Tenant(r.tenantID).Credits
	counter, logKey := credits.Keys(r.prefix, r.tenantID)
	consumed, err := r.rdb.Get(ctx, counter).Int64()
	testenv.Must(t, err)
	lc := fresh.Limiter(counter, logKey)
	if hot := lc.LineAt(r.drainAt.UnixMicro()) - consumed; hot != acct.Balance() || acct.Balance() != 10 {
		t.Errorf("after the expiry: the check path's balance %d, the ledger's %d; want 10 both", hot, acct.Balance())
	}
}

// TestDemoHasCreditsAndALedger: the demo's prepaid tenant has grants (one
// expired with units left, one expiring soon), a month of consumption and
// an adjustment in its ledger, which adds up; the drainer builds the
// hot-path counter from it without drift.
func TestDemoHasCreditsAndALedger(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	rdb, prefix := testenv.Redis(t)
	_, err := demo.Seed(ctx, db, audit.CLI, testkeys.SecretKeys(t))
	testenv.Must(t, err)
	tn, err := tenants.NewStore(db).GetByName(ctx, "demo-prepaid")
	testenv.Must(t, err)
	b, err := credits.NewStore(db).Balance(ctx, tn.ID)
	testenv.Must(t, err)
	var expired, expiring int
	for _, g := range b.Grants {
		switch {
		case g.ExpiredAt != nil && g.Amount > 0:
			expired++
		case g.ExpiresAt != nil:
			expiring++
		}
	}
	if b.Settings == nil || b.Balance <= 0 || expired != 1 || expiring != 1 {
		t.Fatalf("demo credits: %+v", b)
	}
	kinds := map[string]int{}
	var sum int64
	for _, e := range ledger(t, db, tn.ID) {
		kinds[e.Kind]++
		sum += e.Units
	}
	for _, g := range b.Grants {
		if g.ExpiresAt != nil && g.ExpiredAt == nil && g.Remaining == 0 {
			t.Errorf("the grant that expires soon has nothing left: %+v", g)
		}
	}
	var expiredUnits int64
	testenv.Must(t, db.QueryRow(ctx, `SELECT -coalesce(sum(units), 0) FROM credit_ledger WHERE tenant_id = $1 AND kind = 'expiry'`, tn.ID).Scan(&expiredUnits))
	if expiredUnits <= 0 {
		t.Errorf("the expired grant had no units left (%d)", expiredUnits)
	}
	if kinds[credits.KindGrant] != 3 || kinds[credits.KindExpiry] != 1 || kinds[credits.KindConsumption] < 20 || kinds[credits.KindAdjustment] != 1 || sum != b.Balance {
		t.Errorf("demo ledger: %v rows adding up to %d, balance %d", kinds, sum, b.Balance)
	}
	d := credits.NewDrainer(db, redisstore.New(rdb), credits.DrainerConfig{Prefix: prefix})
	rep, err := d.Drain(ctx)
	testenv.Must(t, err)
	if rep.Rebuilt != 1 || rep.Drift != 0 {
		t.Errorf("first drain of the demo: %+v, want its counter rebuilt from the ledger", rep)
	}
	// Seeding again changes no credits.
	_, err = demo.Seed(ctx, db, audit.CLI, testkeys.SecretKeys(t))
	testenv.Must(t, err)
	again, err := credits.NewStore(db).Balance(ctx, tn.ID)
	testenv.Must(t, err)
	if again.Balance != b.Balance || len(again.Grants) != len(b.Grants) {
		t.Errorf("after seeding again: balance %d, %d grants; want %d, %d", again.Balance, len(again.Grants), b.Balance, len(b.Grants))
	}
}

// TestStatementShowsCreditsAcrossTheMonthsClose: the statement shows the
// month's credits granted, used and expired from the ledger; once the
// month is closed its frozen statement keeps them, and the ledger and the
// hot-path counter still agree.
func TestStatementShowsCreditsAcrossTheMonthsClose(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.grant(100, time.Hour, 0)
	r.topUp(50)
	r.check(30)
	r.drainAt = time.Now().Add(2 * time.Hour) // the 100 expires with 70 left
	r.agree()
	month := usage.MonthOf(time.Now())
	st, err := billing.NewStore(r.db, nil).Statement(ctx, r.tenantID, month)
	testenv.Must(t, err)
	if st.Credits == nil || st.Credits.Granted != 150 || st.Credits.Used != 30 || st.Credits.Expired != 70 || st.Credits.Closing != 50 {
		t.Fatalf("statement credits %+v, want 150 granted, 30 used, 70 expired, 50 left", st.Credits)
	}
	// Close the month from its end: the frozen statement keeps its credits.
	closer := billing.NewOps(r.db, func() time.Time { return month.End().Add(time.Hour) })
	_, err = closer.CloseMonth(ctx, audit.CLI, month, nil)
	testenv.Must(t, err)
	frozen, err := billing.NewStore(r.db, nil).Statement(ctx, r.tenantID, month)
	testenv.Must(t, err)
	if frozen.Status != "closed" || frozen.Credits == nil || *frozen.Credits != *st.Credits {
		t.Errorf("closed statement: %s, credits %+v; want %+v", frozen.Status, frozen.Credits, st.Credits)
	}
	r.check(5)
	if acct := r.agree(); acct.Balance() != 45 {
		t.Errorf("balance after the close %d, want 45", acct.Balance())
	}
}

// TestDrainerExpiresByTheStoresClock: without a clock of its own the
// drainer expires grants by the limiter store's clock (Redis's TIME, the
// clock checks are decided at), not by the admin process's.
func TestDrainerExpiresByTheStoresClock(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.grant(10, time.Hour, 0)
	r.grant(5, 0, 0)
	ahead := time.Now().Add(2 * time.Hour)
	store := limiter.NewMemoryStore(func() int64 { return ahead.UnixMicro() })
	d := credits.NewDrainer(r.db, store, credits.DrainerConfig{Prefix: r.prefix})
	rep, err := d.Drain(ctx)
	testenv.Must(t, err)
	acct, err := credits.NewStore(r.db).Account(ctx, r.tenantID)
	testenv.Must(t, err)
	if rep.Expired != 1 || acct.Balance() != 5 {
		t.Errorf("drain at the store's clock two hours ahead: %+v, balance %d; want the grant of an hour expired, 5 left", rep, acct.Balance())
	}
}

// TestOneBalanceThatCannotBeDrainedHoldsUpNoOther: a balance whose log
// Redis refuses to read (here not a stream) fails its drain, named in
// the error; every other balance is drained in the same pass.
func TestOneBalanceThatCannotBeDrainedHoldsUpNoOther(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(100)
	ts := tenants.NewStore(r.db)
	other, err := ts.Create(ctx, "globex", r.planID)
	testenv.Must(t, err)
	otherKey, _, err := ts.IssueKey(ctx, other.ID, "", nil)
	testenv.Must(t, err)
	_, err = r.ops.Grant(ctx, audit.CLI, other.ID, credits.GrantInput{Amount: 100, Cause: "test"})
	testenv.Must(t, err)
	r.reload()
	r.drain() // the other balance's counter made
	r.reload()
	r.check(10)
	if _, err := r.checker.Check(ctx, enforce.Request{Key: otherKey, Cost: 7, Resource: "GET /x"}); err != nil {
		t.Fatal(err)
	}
	// The balance drained first is the one that fails.
	ids, err := credits.NewStore(r.db).Tenants(ctx)
	testenv.Must(t, err)
	broken, healthy, want := ids[0], r.tenantID, int64(10)
	if broken == r.tenantID {
		healthy, want = other.ID, 7
	}
	_, log := credits.Keys(r.prefix, broken)
	testenv.Must(t, r.rdb.Del(ctx, log).Err())
	testenv.Must(t, r.rdb.Set(ctx, log, "not a stream", 0).Err())
	_, err = r.drainer.Drain(ctx)
	if err == nil || !strings.Contains(err.Error(), broken) {
		t.Fatalf("drain: %v, want an error naming %s", err, broken)
	}
	a, err := credits.NewStore(r.db).Account(ctx, healthy)
	testenv.Must(t, err)
	if a.Consumed != want {
		t.Errorf("the other balance after the pass: consumed %d, want its %d drained", a.Consumed, want)
	}
}

// TestAPassEndsWhenEveryBalanceFails: balances failing one after the
// other are an outage, not a balance's trouble: the pass ends after
// three, saying so, rather than wait out every balance's failure.
func TestAPassEndsWhenEveryBalanceFails(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	ts := tenants.NewStore(r.db)
	ids := []string{r.tenantID}
	for _, name := range []string{"globex", "initech", "umbrella"} {
		tn, err := ts.Create(ctx, name, r.planID)
		testenv.Must(t, err)
		ids = append(ids, tn.ID)
	}
	for _, id := range ids {
		_, log := credits.Keys(r.prefix, id)
		testenv.Must(t, r.rdb.Del(ctx, log).Err())
		testenv.Must(t, r.rdb.Set(ctx, log, "not a stream", 0).Err())
	}
	_, err := r.drainer.Drain(ctx)
	if err == nil || !strings.Contains(err.Error(), "3 balances in a row") || strings.Count(err.Error(), "credits: drain ") != 3 {
		t.Errorf("drain: %v, want three balances named and the pass ended", err)
	}
}

// TestAnUpgradedRedisKeepsItsPosition: a Redis an earlier release kept
// one identity for (at {credits}:origin, written on the account as
// log_origin), whose logs have none of their own yet, is the same Redis:
// the drainer keeps the account's position, and what a failed trim left
// in the log before it is not recorded again. A Redis with no identity
// at all is another's: its log is read from its beginning.
func TestAnUpgradedRedisKeepsItsPosition(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(20)
	r.admitted(3)
	r.drainUntrimmed() // recorded, its trim failed: the log still holds the 3 entries
	_, logKey := credits.Keys(r.prefix, r.tenantID)
	// As the earlier release left it: one identity for the Redis, on the
	// account, and none beside the log.
	testenv.Must(t, r.rdb.Del(ctx, redisstore.CreditsOriginKey(logKey)).Err())
	testenv.Must(t, r.rdb.Set(ctx, r.prefix+"{credits}:origin", "legacy", 0).Err())
	_, err := r.db.Exec(ctx, `UPDATE credit_accounts SET log_origin = 'legacy' WHERE tenant_id = $1`, r.tenantID)
	testenv.Must(t, err)

	if rep := r.drain(); rep.Entries != 0 || rep.Drift != 0 {
		t.Errorf("drain after the upgrade: %+v, want nothing recorded again and no drift", rep)
	}
	if acct, err := credits.NewStore(r.db).Account(ctx, r.tenantID); err != nil || acct.Consumed != 3 {
		t.Errorf("account %+v, %v: want 3 consumed", acct, err)
	}
	if origin, err := r.rdb.Get(ctx, redisstore.CreditsOriginKey(logKey)).Result(); err != nil || origin != "legacy" {
		t.Errorf("the log's identity %q (%v), want the Redis's, legacy", origin, err)
	}
}
