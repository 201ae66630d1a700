package credits_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// regionRig is one balance drawn from three regions: each its own state
// keys in Redis (a prefix of its own stands for a Redis of its own), its
// own checker with a snapshot read as its region, its own drainer; one
// Postgres.
type regionRig struct {
	t        *testing.T
	ops      *credits.Ops
	store    *credits.Store
	tenantID string
	key      string
	regions  map[string]*regionSide
}

type regionSide struct {
	name     string
	rdb      *redis.Client
	prefix   string
	holder   *snapshot.Holder
	checker  *enforce.Checker
	drainer  *credits.Drainer
	admitted int64
}

var regionNames = []string{"us", "eu", "ap"}

func newRegionRig(t *testing.T, mode credits.Mode, overdraft int64, margin time.Duration) *regionRig {
	t.Helper()
	ctx := context.Background()
	db := testenv.DB(t)
	p, err := plans.NewStore(db).Put(ctx, plans.Plan{Name: "prepaid", Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1_000_000, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	r := &regionRig{t: t, ops: credits.NewOps(db, nil), store: credits.NewStore(db), regions: map[string]*regionSide{}}
	_, err = r.ops.SetPlan(ctx, audit.CLI, p.ID, credits.PlanSettingsInput{Mode: mode, Overdraft: overdraft})
	testenv.Must(t, err)
	ts := tenants.NewStore(db)
	tn, err := ts.Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	r.tenantID = tn.ID
	r.key, _, err = ts.IssueKey(ctx, tn.ID, "", nil)
	testenv.Must(t, err)
	for _, name := range regionNames {
		s := &regionSide{name: name}
		s.rdb, s.prefix = testenv.Redis(t)
		s.holder = snapshot.NewHolder(snapshot.NewPostgresSource(db).InRegion(name), slog.New(slog.DiscardHandler))
		store := redisstore.New(s.rdb)
		s.checker = enforce.NewChecker(s.holder, store, enforce.CheckerConfig{Prefix: s.prefix, NoLocalDenials: true})
		t.Cleanup(s.checker.Close)
		testenv.Must(t, s.holder.Reload(ctx))
		s.drainer = credits.NewDrainer(db, store, credits.DrainerConfig{Prefix: s.prefix, Region: name,
			Regions: len(regionNames), Margin: margin})
		r.regions[name] = s
	}
	return r
}

// drain drains the regions named (every region with none) and reloads
// their snapshots.
func (r *regionRig) drain(names ...string) {
	r.t.Helper()
	if len(names) == 0 {
		names = regionNames
	}
	for _, name := range names {
		s := r.regions[name]
		_, err := s.drainer.Drain(context.Background())
		testenv.Must(r.t, err)
		testenv.Must(r.t, s.holder.Reload(context.Background()))
	}
}

// hammer sends n checks of cost 1 to each region named at once and
// returns the admitted ones.
func (r *regionRig) hammer(n int, names ...string) (admitted int64) {
	r.t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range names {
		s := r.regions[name]
		for range 4 {
			wg.Go(func() {
				for range n / 4 {
					d, err := s.checker.Check(context.Background(), enforce.Request{Key: r.key, Cost: 1, Resource: "GET /x"})
					if err != nil {
						r.t.Error(err)
						return
					}
					if d.Allowed {
						mu.Lock()
						s.admitted++
						admitted++
						mu.Unlock()
					}
				}
			})
		}
	}
	wg.Wait()
	return admitted
}

func (r *regionRig) escrows() map[string]credits.Escrow {
	r.t.Helper()
	list, err := r.store.Escrows(context.Background(), r.tenantID)
	testenv.Must(r.t, err)
	out := map[string]credits.Escrow{}
	for _, e := range list {
		out[e.Region] = e
	}
	return out
}

// A balance of 300 with an overdraft of 20, drawn from three regions at
// once, with one region cut off from the ledger (its drainer stopped)
// half way: the regions together never admit more than 320, they admit
// all 320 in the end, and the ledger records every admitted unit once.
func TestBalanceDrawnFromThreeRegionsIsNeverOverdrawn(t *testing.T) {
	r := newRegionRig(t, credits.ModeDeny, 20, 0)
	_, err := r.ops.Grant(context.Background(), audit.CLI, r.tenantID, credits.GrantInput{Amount: 300, Cause: "test"})
	testenv.Must(t, err)
	// Before the first drain no region holds escrow: nothing is drawn.
	if got := r.hammer(8, regionNames...); got != 0 {
		t.Fatalf("admitted %d before any escrow was reserved", got)
	}
	var total int64
	const limit = 320
	round := func(names ...string) {
		r.drain(names...)
		var held int64
		for _, e := range r.escrows() {
			held += e.Held
		}
		b, err := r.store.Balance(context.Background(), r.tenantID)
		testenv.Must(t, err)
		// What the regions hold never exceeds what the ledger has left.
		if held > b.Balance+20 {
			t.Fatalf("the regions hold %d in escrow, the ledger has %d and an overdraft of 20 left", held, b.Balance)
		}
		total += r.hammer(40, regionNames...)
		if total > limit {
			t.Fatalf("admitted %d, above the balance and its overdraft (%d)", total, limit)
		}
	}
	for range 2 {
		round()
	}
	// ap is cut off from the ledger: it draws what it holds, no more.
	cut := r.escrows()["ap"].Held
	apBefore := r.regions["ap"].admitted
	for range 12 {
		round("us", "eu")
	}
	if got := r.regions["ap"].admitted - apBefore; got > cut {
		t.Errorf("ap admitted %d while cut off, holding %d", got, cut)
	}
	// Healed: its drainer records its draws, gives back what it holds
	// past its share, and the rest of the balance is drawn.
	for range 12 {
		round()
	}
	r.drain()
	if total != limit {
		t.Errorf("admitted %d in all, want the whole balance and overdraft, %d", total, limit)
	}
	b, err := r.store.Balance(context.Background(), r.tenantID)
	testenv.Must(t, err)
	if b.Consumed != total || b.Balance != -20 {
		t.Errorf("ledger: consumed %d, balance %d; want %d and -20", b.Consumed, b.Balance, total)
	}
	for name, e := range r.escrows() {
		if e.Counted != r.regions[name].admitted {
			t.Errorf("%s: the ledger counted %d of its draws, it admitted %d", name, e.Counted, r.regions[name].admitted)
		}
	}
	t.Logf("admitted us %d, eu %d, ap %d (ap held %d when cut off)", r.regions["us"].admitted, r.regions["eu"].admitted,
		r.regions["ap"].admitted, cut)
}

// In overage mode a region refuses nothing, and the ledger draws the
// balance down to −overdraft in the order it records the regions'
// draws: the rest is overage, never more drawn than the balance allows.
func TestOverageAcrossRegionsDrawsTheLedgerOnce(t *testing.T) {
	r := newRegionRig(t, credits.ModeOverage, 10, 0)
	_, err := r.ops.Grant(context.Background(), audit.CLI, r.tenantID, credits.GrantInput{Amount: 100, Cause: "test"})
	testenv.Must(t, err)
	r.drain()
	var total int64
	for range 3 {
		total += r.hammer(40, regionNames...)
		r.drain()
	}
	if total != 3*3*40 {
		t.Fatalf("admitted %d of %d in overage mode", total, 3*3*40)
	}
	b, err := r.store.Balance(context.Background(), r.tenantID)
	testenv.Must(t, err)
	m, err := r.store.Month(context.Background(), r.tenantID, time.Now().UTC().AddDate(0, 0, 1-time.Now().UTC().Day()).Truncate(24*time.Hour))
	testenv.Must(t, err)
	if b.Balance != -10 || m.Used != 110 || m.Overage != total-110 {
		t.Errorf("balance %d, used %d, overage %d; want -10, 110, %d", b.Balance, m.Used, m.Overage, total-110)
	}
}

// A region's escrow reserved from a grant that expires lapses with it,
// by the store's clock, even when its drainer never runs again; and no
// escrow is reserved from units that expire within the margin.
func TestRegionsEscrowLapsesWithItsGrant(t *testing.T) {
	r := newRegionRig(t, credits.ModeDeny, 0, 500*time.Millisecond)
	at := time.Now().Add(2 * time.Second)
	_, err := r.ops.Grant(context.Background(), audit.CLI, r.tenantID, credits.GrantInput{Amount: 1000, ExpiresAt: &at, Cause: "test"})
	testenv.Must(t, err)
	r.drain()
	e := r.escrows()["us"]
	if e.Held == 0 || e.LapseAt == nil || !e.LapseAt.Equal(at.Truncate(time.Microsecond)) {
		t.Fatalf("us escrow %+v: want some held, lapsing at %v", e, at)
	}
	if got := r.hammer(4, "us"); got != 4 {
		t.Fatalf("admitted %d of 4 before the expiry", got)
	}
	testenv.Eventually(t, time.Now(), 10*time.Second, "us refusing once the grant expired", func() (bool, string) {
		got := r.hammer(4, "us")
		return got == 0 && time.Now().After(at), ""
	})
	// The drainers then expire it and reserve nothing more.
	r.drain()
	r.drain()
	for name, e := range r.escrows() {
		if e.Held != 0 {
			t.Errorf("%s holds %d after its grant expired", name, e.Held)
		}
	}
	b, err := r.store.Balance(context.Background(), r.tenantID)
	testenv.Must(t, err)
	if b.Balance != 0 || b.Consumed != r.regions["us"].admitted {
		t.Errorf("ledger balance %d, consumed %d; want 0 and %d", b.Balance, b.Consumed, r.regions["us"].admitted)
	}
}

// A deployment of one region that becomes several: its Redis's drainer,
// now a region's, records the entries the single-region drainer left and
// none it had recorded, and turns the counter into the region's
// (counted − escrow).
func TestOneRegionBecomesSeveral(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(100)
	for range 6 {
		r.check(1)
	}
	r.drain() // 6 recorded by the drainer of one region
	for range 4 {
		r.check(1)
	}
	d := credits.NewDrainer(r.db, redisstore.New(r.rdb), credits.DrainerConfig{Prefix: r.prefix, Region: "us", Regions: 2})
	for range 2 {
		_, err := d.Drain(ctx)
		testenv.Must(t, err)
	}
	store := credits.NewStore(r.db)
	b, err := store.Balance(ctx, r.tenantID)
	testenv.Must(t, err)
	if b.Consumed != 10 {
		t.Errorf("ledger consumed %d, want 10: each draw recorded once", b.Consumed)
	}
	e := b.Escrows
	if len(e) != 1 || e[0].Counted != 4 || e[0].Held <= 0 {
		t.Fatalf("escrows %+v: want us counting the 4 draws after the switch and holding some", e)
	}
	counter, _ := credits.Keys(r.prefix, r.tenantID)
	got, err := r.rdb.Get(ctx, counter).Int64()
	testenv.Must(t, err)
	if got != e[0].Counted-e[0].Escrow {
		t.Errorf("counter %d, want counted − escrow = %d", got, e[0].Counted-e[0].Escrow)
	}
}

// TestANewRegionBehindTheAccountsPositionRecordsItsLog: a deployment of
// one region becomes two, its Redis (now us's) an hour ahead of eu's by
// the IDs of its log. eu's entries, before the account's position, are
// still recorded, each once, and drawn once (no drift repaired away,
// which would let eu draw them again); us, whose last trim as the one
// region failed, records none of the entries its drainer had.
func TestANewRegionBehindTheAccountsPositionRecordsItsLog(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, credits.ModeDeny, 0, 0)
	r.topUp(100)
	for range 5 {
		r.check(1)
	}
	// A draw of 1 an hour ahead: Redis numbers the log's next entries
	// after it, as a clock an hour ahead would.
	ahead := r.loggedAt(time.Now().Add(time.Hour).UnixMilli())
	// 6 recorded by the drainer of one region, through ahead; its trim
	// failed, so the log keeps them.
	r.drainUntrimmed()
	if acct, err := credits.NewStore(r.db).Account(ctx, r.tenantID); err != nil || acct.Position != ahead || acct.Consumed != 6 {
		t.Fatalf("account %+v, %v: want 6 consumed through %s", acct, err, ahead)
	}
	for range 2 {
		r.check(1)
	}

	eu := &regionSide{name: "eu"}
	eu.rdb, eu.prefix = testenv.Redis(t)
	eu.holder = snapshot.NewHolder(snapshot.NewPostgresSource(r.db).InRegion("eu"), slog.New(slog.DiscardHandler))
	euStore := redisstore.New(eu.rdb)
	eu.checker = enforce.NewChecker(eu.holder, euStore, enforce.CheckerConfig{Prefix: eu.prefix, NoLocalDenials: true})
	t.Cleanup(eu.checker.Close)
	eu.drainer = credits.NewDrainer(r.db, euStore, credits.DrainerConfig{Prefix: eu.prefix, Region: "eu", Regions: 2})
	us := credits.NewDrainer(r.db, redisstore.New(r.rdb), credits.DrainerConfig{Prefix: r.prefix, Region: "us", Regions: 2})
	drainEU := func() {
		t.Helper()
		rep, err := eu.drainer.Drain(ctx)
		testenv.Must(t, err)
		if rep.Drift != 0 {
			t.Errorf("eu's drain repaired a drift of %d: its counter and the ledger disagreed", rep.Drift)
		}
		testenv.Must(t, eu.holder.Reload(ctx))
	}
	drainUS := func() {
		t.Helper()
		_, err := us.Drain(ctx)
		testenv.Must(t, err)
	}
	drainEU()
	drainUS()
	for range 10 {
		d, err := eu.checker.Check(ctx, enforce.Request{Key: r.key, Cost: 1, Resource: "GET /x"})
		testenv.Must(t, err)
		if d.Allowed {
			eu.admitted++
		}
	}
	if eu.admitted == 0 {
		t.Fatal("eu admitted nothing: no escrow reserved to it")
	}
	_, euLog := credits.Keys(eu.prefix, r.tenantID)
	last, err := eu.rdb.XRevRangeN(ctx, euLog, "+", "-", 1).Result()
	testenv.Must(t, err)
	if len(last) != 1 || last[0].ID >= ahead { // same number of digits: compared as strings
		t.Fatalf("eu's log ends at %v: want entries before the account's position %s", last, ahead)
	}
	for range 2 {
		drainEU()
		drainUS()
	}

	store := credits.NewStore(r.db)
	b, err := store.Balance(ctx, r.tenantID)
	testenv.Must(t, err)
	if want := 6 + 2 + eu.admitted; b.Consumed != want {
		t.Errorf("ledger consumed %d, want %d: 6 as one region, 2 in us and %d in eu after, each once", b.Consumed, want, eu.admitted)
	}
	escrows := map[string]credits.Escrow{}
	for _, e := range b.Escrows {
		escrows[e.Region] = e
	}
	if escrows["us"].Counted != 2 || escrows["eu"].Counted != eu.admitted {
		t.Errorf("escrows %+v: want us counting 2 and eu %d", b.Escrows, eu.admitted)
	}
	for region, want := range map[string]int64{"us": 2, "eu": eu.admitted} {
		var rows, units int64
		testenv.Must(t, r.db.QueryRow(ctx, `SELECT count(*), coalesce(-sum(units), 0) FROM credit_ledger
			WHERE tenant_id = $1 AND kind = 'consumption' AND entry LIKE $2`, r.tenantID, region+":%").Scan(&rows, &units))
		if rows != want || units != want {
			t.Errorf("%s's entries in the ledger: %d rows of %d units, want %d of %d", region, rows, units, want, want)
		}
	}
	euCounter, _ := credits.Keys(eu.prefix, r.tenantID)
	got, err := eu.rdb.Get(ctx, euCounter).Int64()
	testenv.Must(t, err)
	if e := escrows["eu"]; got != e.Counted-e.Escrow {
		t.Errorf("eu's counter %d, want counted − escrow = %d", got, e.Counted-e.Escrow)
	}
}

// TestTheOneRegionsRedisWithoutItsCounterRecordsNothingTwice: the Redis
// of a deployment of one region still logs the entries its drainer
// recorded (their trim failed) but has no counter: a failover to a
// replica that lacked the counter's SET, or, in overage mode, the
// counter lost while checks go on logging deferred draws, so the drainer
// cannot make it. That Redis's region, once there are several, starts at
// the account's position all the same: each draw is recorded once.
func TestTheOneRegionsRedisWithoutItsCounterRecordsNothingTwice(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     credits.Mode
		deferred int64 // checks after the counter is lost: logged deferred
	}{
		{"deny, counter lost in a failover", credits.ModeDeny, 0},
		{"overage, deferred draws keep coming", credits.ModeOverage, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			r := newRig(t, tc.mode, 0, 0)
			r.topUp(100)
			for range 5 {
				r.check(1)
			}
			counter, _ := credits.Keys(r.prefix, r.tenantID)
			// 5 recorded by the drainer of one region; its trim failed,
			// so the log keeps them; then the counter is gone.
			r.drainUntrimmed()
			testenv.Must(t, r.rdb.Del(ctx, counter).Err())
			if acct, err := credits.NewStore(r.db).Account(ctx, r.tenantID); err != nil || acct.Consumed != 5 {
				t.Fatalf("account %+v, %v: want 5 consumed", acct, err)
			}
			for range tc.deferred {
				if d := r.check(1); !d.Allowed {
					t.Fatalf("check on a lost counter in overage mode: %+v, want admitted (deferred)", d)
				}
			}

			us := credits.NewDrainer(r.db, redisstore.New(r.rdb), credits.DrainerConfig{Prefix: r.prefix, Region: "us", Regions: 2})
			for range 3 {
				_, err := us.Drain(ctx)
				testenv.Must(t, err)
			}
			b, err := credits.NewStore(r.db).Balance(ctx, r.tenantID)
			testenv.Must(t, err)
			if want := 5 + tc.deferred; b.Consumed != want {
				t.Errorf("ledger consumed %d, want %d: 5 as one region and %d deferred after, each once", b.Consumed, want, tc.deferred)
			}
			var rows int64
			testenv.Must(t, r.db.QueryRow(ctx, `SELECT count(*) FROM credit_ledger
				WHERE tenant_id = $1 AND kind = 'consumption' AND entry LIKE 'us:%'`, r.tenantID).Scan(&rows))
			if rows != tc.deferred {
				t.Errorf("us recorded %d entries, want %d: only the deferred draws after the account's position", rows, tc.deferred)
			}
		})
	}
}

// TestAGrantWaitsForTheRegionsDrawingOnIt: in overage mode no region
// holds escrow; a grant's expiry in the ledger still waits for a region
// that was drawing to record what it drew before the expiry, which is
// then drawn from the grant, not billed as overage.
func TestAGrantWaitsForTheRegionsDrawingOnIt(t *testing.T) {
	r := newRegionRig(t, credits.ModeOverage, 0, 0)
	ctx := context.Background()
	at := time.Now().Add(1500 * time.Millisecond)
	_, err := r.ops.Grant(ctx, audit.CLI, r.tenantID, credits.GrantInput{Amount: 100, ExpiresAt: &at, Cause: "test"})
	testenv.Must(t, err)
	r.drain()
	if got := r.hammer(8, "eu"); got != 8 {
		t.Fatalf("eu admitted %d of 8", got)
	}
	r.drain("eu")
	if got := r.hammer(4, "eu"); got != 4 { // drawn before the expiry, recorded after it
		t.Fatalf("eu admitted %d of 4", got)
	}
	testenv.WaitFor(t, 10*time.Second, "the grant's expiry passing", func() bool { return time.Now().After(at.Add(100 * time.Millisecond)) })
	r.drain("us") // the ledger's first pass past the expiry: eu has not recorded its last 4
	r.drain("eu")
	r.drain("us", "eu", "ap")
	m, err := r.store.Month(ctx, r.tenantID, time.Now().UTC().AddDate(0, 0, 1-time.Now().UTC().Day()).Truncate(24*time.Hour))
	testenv.Must(t, err)
	if m.Used != 12 || m.Overage != 0 || m.Expired != 88 {
		t.Errorf("used %d, overage %d, expired %d; want 12 drawn from the grant, no overage, 88 expired", m.Used, m.Overage, m.Expired)
	}
}

// TestAnOverageHoldSettledLowerGivesBackAcrossRegions: in overage mode a
// region holds no escrow, so its store counts a hold's whole estimate
// past the balance (overage), and the drainer draws it on the balance.
// Settled lower, the store gives back that overage first; the drainer
// returns what it drew to the balance, rather than booking negative
// overage and keeping the prepaid units.
func TestAnOverageHoldSettledLowerGivesBackAcrossRegions(t *testing.T) {
	for _, c := range []struct {
		name                       string
		granted, settled           int64
		balance, used, overageLeft int64
	}{
		// The ledger drew all 10: 8 return to the balance.
		{"drawn whole", 100, 2, 98, 2, 0},
		// The ledger drew 6 (all there was), 4 billed as overage: settled
		// at 5, the billed 4 go back first, then 1 of the 6 drawn.
		{"drawn in part", 6, 5, 1, 5, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRegionRig(t, credits.ModeOverage, 0, 0)
			ctx := context.Background()
			_, err := r.ops.Grant(ctx, audit.CLI, r.tenantID, credits.GrantInput{Amount: c.granted, Cause: "test"})
			testenv.Must(t, err)
			r.drain()
			us := r.regions["us"]
			d, err := us.checker.Check(ctx, enforce.Request{Key: r.key, Cost: 10, Resource: "GET /x", Hold: true})
			if err != nil || !d.Allowed {
				t.Fatalf("hold of 10 on %d: %+v, %v", c.granted, d, err)
			}
			r.drain()
			if _, err := us.checker.Settle(ctx, d.HoldID, c.settled); err != nil {
				t.Fatal(err)
			}
			r.drain()
			b, err := r.store.Balance(ctx, r.tenantID)
			testenv.Must(t, err)
			now := time.Now().UTC()
			m, err := r.store.Month(ctx, r.tenantID, time.Date(now.Year(), now.Month(), 1, 0, 0, 0, 0, time.UTC))
			testenv.Must(t, err)
			if b.Balance != c.balance || m.Used != c.used || m.Overage != c.overageLeft {
				t.Errorf("after settling the hold of 10 at %d: balance %d, month used %d, overage %d; want %d, %d, %d",
					c.settled, b.Balance, m.Used, m.Overage, c.balance, c.used, c.overageLeft)
			}
		})
	}
}

// drainUntrimmed drains as r.drain does, but the drainer's trim of the
// consumption log fails: the log keeps the entries it recorded.
func (r *rig) drainUntrimmed() {
	r.t.Helper()
	ctx := context.Background()
	_, logKey := credits.Keys(r.prefix, r.tenantID)
	untrimmed := r.prefix + "untrimmed"
	testenv.Must(r.t, r.rdb.Copy(ctx, logKey, untrimmed, 0, true).Err())
	r.drain()
	testenv.Must(r.t, r.rdb.Copy(ctx, untrimmed, logKey, 0, true).Err())
}
