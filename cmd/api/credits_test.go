package main

import (
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// These tests draw one tenant's prepaid balance through several api
// processes at once and require the ledger, written by the drainer from
// the consumption logs the check script appends, to agree with what the
// clients saw and with the hot-path counter.

// creditTenant makes a plan drawing on credits (mode, overdraft) and a
// tenant on it granted amount units, and returns the tenant's ID and a
// key.
func creditTenant(t *testing.T, r *rig, name string, mode credits.Mode, overdraft, amount int64) (string, string) {
	t.Helper()
	ctx := context.Background()
	// A deny-mode balance fails closed when Redis does not answer in
	// time; a thousand checks at once on a busy machine must not.
	r.env["TOLLGATE_REDIS_TIMEOUT"] = "10s"
	plan, err := plans.NewStore(r.db).Put(ctx, plans.Plan{Name: name, Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1_000_000, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	ops := credits.NewOps(r.db, nil)
	_, err = ops.SetPlan(ctx, audit.CLI, plan.ID, credits.PlanSettingsInput{Mode: mode, Overdraft: overdraft})
	testenv.Must(t, err)
	ts := tenants.NewStore(r.db)
	tn, err := ts.Create(ctx, name, plan.ID)
	testenv.Must(t, err)
	if amount > 0 {
		_, err = ops.Grant(ctx, audit.CLI, tn.ID, credits.GrantInput{Amount: amount, Cause: "test"})
		testenv.Must(t, err)
	}
	secret, _, err := ts.IssueKey(ctx, tn.ID, "", nil)
	testenv.Must(t, err)
	// The drainer (admin serve's, every second) makes the balance's
	// counter from the ledger; checks draw nothing on it before.
	_, err = r.drainer().Drain(ctx)
	testenv.Must(t, err)
	return tn.ID, secret
}

// drainer returns the credits drainer of the rig's Redis keys.
func (r *rig) drainer() *credits.Drainer {
	return credits.NewDrainer(r.db, redisstore.New(r.redis), credits.DrainerConfig{Prefix: r.env["TOLLGATE_KEY_PREFIX"]})
}

// ledgerAgrees drains every balance and checks, for tenantID, that the
// drain found no drift, that the ledger's consumption equals the
// hot-path counter, and returns the ledger's account.
func (r *rig) ledgerAgrees(t *testing.T, tenantID string) credits.Account {
	t.Helper()
	ctx := context.Background()
	d := r.drainer()
	for range 2 {
		rep, err := d.Drain(ctx)
		testenv.Must(t, err)
		if rep.Drift != 0 {
			t.Errorf("drain found drift %d", rep.Drift)
		}
	}
	acct, err := credits.NewStore(r.db).Account(ctx, tenantID)
	testenv.Must(t, err)
	counter, _ := credits.Keys(r.env["TOLLGATE_KEY_PREFIX"], tenantID)
	hot, err := r.redis.Get(ctx, counter).Int64()
	testenv.Must(t, err)
	var sum, consumed int64
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT coalesce(sum(units), 0), coalesce(-sum(units) FILTER (WHERE kind = 'consumption'), 0)
		FROM credit_ledger WHERE tenant_id = $1`, tenantID).Scan(&sum, &consumed))
	if hot != acct.Consumed || consumed != acct.Consumed || sum != acct.Balance() {
		t.Errorf("counter %d, ledger consumption %d, account consumed %d; ledger sum %d, account balance %d",
			hot, consumed, acct.Consumed, sum, acct.Balance())
	}
	return acct
}

// draw sends n checks of cost 1 for key at once, spread over addrs, and
// returns how many were admitted, how many were refused for credits, and
// how many got no answer.
func (r *rig) draw(t *testing.T, addrs []string, key string, n int) (admitted, exhausted, failed int64) {
	t.Helper()
	client := &http.Client{Timeout: 30 * time.Second}
	var a, x, f atomic.Int64
	testenv.AtOnce(n, func(i int) {
		d, err := checkReason(client, addrs[i%len(addrs)], r.token, map[string]any{"key": key, "resource": "GET /x", "cost": 1})
		switch {
		case err != nil:
			f.Add(1)
		case d.Allowed:
			a.Add(1)
		case d.Reason == tollgate.ReasonCreditsExhausted:
			x.Add(1)
		default:
			t.Errorf("denied for %s", d.Reason)
		}
	})
	return a.Load(), x.Load(), f.Load()
}

// TestCreditsExactAcrossThreeAPIs: 1,000 concurrent draws through 3 api
// processes against a balance of 500 admit exactly 500 (505 with an
// overdraft of 5); the ledger says the same, and the balance is 0 (−5).
// A top-up then reaches every process.
func TestCreditsExactAcrossThreeAPIs(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	plain, plainKey := creditTenant(t, r, "prepaid", credits.ModeDeny, 0, 500)
	over, overKey := creditTenant(t, r, "prepaid-overdraft", credits.ModeDeny, 5, 500)
	apis := addrs([]*api{r.startAPI(t), r.startAPI(t), r.startAPI(t)})
	for _, tc := range []struct {
		name, tenant, key string
		want, balance     int64
	}{{"no overdraft", plain, plainKey, 500, 0}, {"overdraft 5", over, overKey, 505, -5}} {
		admitted, exhausted, failed := r.draw(t, apis, tc.key, 1000)
		if admitted != tc.want || exhausted != 1000-tc.want || failed != 0 {
			t.Errorf("%s: %d admitted, %d credits_exhausted, %d failed; want exactly %d admitted", tc.name, admitted, exhausted, failed, tc.want)
		}
		acct := r.ledgerAgrees(t, tc.tenant)
		if acct.Consumed != tc.want || acct.Balance() != tc.balance {
			t.Errorf("%s: ledger consumed %d, balance %d; want %d and %d", tc.name, acct.Consumed, acct.Balance(), tc.want, tc.balance)
		}
	}

	// A top-up of 20 reaches every api process: each admits a dry run of
	// cost 20 (the balance after the grant) once its snapshot has it.
	_, err := credits.NewOps(r.db, nil).Grant(context.Background(), audit.CLI, plain, credits.GrantInput{Amount: 20, Cause: "top-up"})
	testenv.Must(t, err)
	granted := time.Now()
	client := &http.Client{Timeout: 10 * time.Second}
	for _, addr := range apis {
		testenv.Eventually(t, granted, 10*time.Second, "the top-up seen by "+addr, func() (bool, string) {
			d, err := checkReason(client, addr, r.token, map[string]any{"key": plainKey, "resource": "GET /x", "cost": 20, "dry_run": true})
			return err == nil && d.Allowed, fmt.Sprintf("%+v %v", d, err)
		})
	}
	t.Logf("a top-up reached all 3 api processes %v after its commit", time.Since(granted).Round(time.Millisecond))
}

// startAPIProcess starts the api as a program of its own (so that a test
// can kill it with SIGKILL) that never flushes usage, waits until it is
// ready and returns its address and process.
func (r *rig) startAPIProcess(t *testing.T) (string, *testenv.Process) {
	t.Helper()
	addr := testenv.FreeAddr(t)
	env := []string{}
	for k, v := range r.env {
		env = append(env, k+"="+v)
	}
	env = append(env, "TOLLGATE_API_ADDR="+addr, "TOLLGATE_USAGE_FLUSH=1h")
	cmd := exec.Command(admintest.Binary(t, "cmd/api"))
	cmd.Env = env
	p := testenv.StartProcess(t, "api", cmd, syscall.SIGKILL, time.Second, nil)
	testenv.Eventually(t, time.Now(), 30*time.Second, "the api process is ready", func() (bool, string) {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, res.Status
	})
	return addr, p
}

// TestCreditsOfAKilledAPI: an api process is killed (SIGKILL) while
// checks draw on a balance through it. Its draws were recorded by the
// script calls that made them, not by its memory: once the drainer has
// run, the ledger's consumption equals the hot-path counter, and lies
// between the units the clients saw admitted and those plus the checks
// that got no answer (decided, perhaps, as the process died).
func TestCreditsOfAKilledAPI(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	tenantID, key := creditTenant(t, r, "prepaid", credits.ModeDeny, 0, 100_000)
	// Usage is never flushed before the kill: nothing of the draws can
	// reach Postgres through the process.
	addr, doomed := r.startAPIProcess(t)
	client := &http.Client{Timeout: 10 * time.Second}
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				d, err := checkReason(client, addr, r.token, map[string]any{"key": key, "resource": "GET /x", "cost": 3})
				if err != nil {
					failed.Add(1)
					return
				}
				if d.Allowed {
					admitted.Add(3)
				}
			}
		}()
	}
	// Kill it mid-draw, once a few hundred units are admitted.
	testenv.Eventually(t, time.Now(), 30*time.Second, "draws admitted", func() (bool, string) {
		return admitted.Load() >= 600, fmt.Sprint(admitted.Load())
	})
	doomed.Kill() // SIGKILL
	wg.Wait()
	acct := r.ledgerAgrees(t, tenantID)
	seen, lost := admitted.Load(), 3*failed.Load()
	t.Logf("clients saw %d units admitted, %d checks unanswered; the ledger recorded %d", seen, failed.Load(), acct.Consumed)
	if acct.Consumed < seen || acct.Consumed > seen+lost {
		t.Errorf("ledger consumption %d, want between %d (seen admitted) and %d", acct.Consumed, seen, seen+lost)
	}
}

// TestCreditsRebuiltAfterRedisLosesThem: Redis restarts without
// persistence (the tenant's counter and log are gone). The drainer
// rebuilds the counter from the ledger, and checks go on from the
// ledger's balance.
func TestCreditsRebuiltAfterRedisLosesThem(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, testenv.DatabaseURL(t))
	tenantID, key := creditTenant(t, r, "prepaid", credits.ModeDeny, 0, 300)
	apis := addrs([]*api{r.startAPI(t), r.startAPI(t)})
	if admitted, _, _ := r.draw(t, apis, key, 120); admitted != 120 {
		t.Fatalf("%d of 120 admitted", admitted)
	}
	before := r.ledgerAgrees(t, tenantID)
	counter, log := credits.Keys(r.env["TOLLGATE_KEY_PREFIX"], tenantID)
	testenv.Must(t, r.redis.Del(ctx, counter, log).Err())
	rep, err := r.drainer().Drain(ctx)
	testenv.Must(t, err)
	if rep.Rebuilt != 1 {
		t.Errorf("drain after the loss: %+v, want one counter rebuilt", rep)
	}
	hot, err := r.redis.Get(ctx, counter).Int64()
	testenv.Must(t, err)
	if hot != before.Consumed {
		t.Errorf("rebuilt counter %d, want the ledger's %d", hot, before.Consumed)
	}
	// 180 left: 200 draws admit 180.
	if admitted, _, _ := r.draw(t, apis, key, 200); admitted != 180 {
		t.Errorf("%d of 200 admitted after the rebuild, want 180", admitted)
	}
	if acct := r.ledgerAgrees(t, tenantID); acct.Balance() != 0 {
		t.Errorf("balance %d, want 0", acct.Balance())
	}
	// GET /v1/me shows the balance with the plan's rules.
	var st tollgate.Standing
	if status, _, p := getMe(t, "http://"+apis[0], bearer(key), &st); status != http.StatusOK || st.Credits == nil ||
		st.Credits.Balance != 0 || st.Credits.Mode != string(credits.ModeDeny) {
		t.Errorf("GET /v1/me: %d %v, credits %+v", status, p, st.Credits)
	}
}

// TestLocalDenialSaysNothingOfCredits: a check denied from the api's
// cache of recent denials never reached the store, so its answer shows
// no balance (rather than a balance of 0), while answers the store gave
// show the real one.
func TestLocalDenialSaysNothingOfCredits(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	ctx := context.Background()
	plan, err := plans.NewStore(r.db).Put(ctx, plans.Plan{Name: "prepaid-strict", Rules: []plans.Rule{
		{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1, PeriodUS: limiter.HourUS}}})
	testenv.Must(t, err)
	ops := credits.NewOps(r.db, nil)
	_, err = ops.SetPlan(ctx, audit.CLI, plan.ID, credits.PlanSettingsInput{Mode: credits.ModeDeny})
	testenv.Must(t, err)
	ts := tenants.NewStore(r.db)
	tn, err := ts.Create(ctx, "prepaid-strict", plan.ID)
	testenv.Must(t, err)
	_, err = ops.Grant(ctx, audit.CLI, tn.ID, credits.GrantInput{Amount: 50, Cause: "test"})
	testenv.Must(t, err)
	key, _, err := ts.IssueKey(ctx, tn.ID, "", nil)
	testenv.Must(t, err)
	_, err = r.drainer().Drain(ctx)
	testenv.Must(t, err)
	a := r.startAPI(t)
	type answer struct {
		Allowed bool                   `json:"allowed"`
		Reason  string                 `json:"reason"`
		Credits *enforce.CreditsResult `json:"credits"`
	}
	check := func() answer {
		t.Helper()
		var d answer
		testenv.Must(t, postJSON(http.DefaultClient, "http://"+a.addr+"/v1/check", r.token,
			map[string]any{"key": key, "resource": "GET /x"}, &d))
		return d
	}
	if d := check(); !d.Allowed || d.Credits == nil || d.Credits.Balance != 49 {
		t.Fatalf("first check: %+v (credits %+v), want allowed with a balance of 49", d, d.Credits)
	}
	// The store denies the second (the rule allows 1 an hour) and reports
	// the balance untouched; the api remembers the denial.
	if d := check(); d.Allowed || d.Credits == nil || d.Credits.Balance != 49 {
		t.Fatalf("second check: %+v (credits %+v), want denied by the store with a balance of 49", d, d.Credits)
	}
	// The third is denied locally: no balance in the answer.
	if d := check(); d.Allowed || d.Reason != tollgate.ReasonRateLimited || d.Credits != nil {
		t.Fatalf("third check: %+v (credits %+v), want rate_limited without credits", d, d.Credits)
	}
}

// TestCreditsNeverDrawnTwiceAfterRedisIsFlushed: Redis is flushed
// (FLUSHALL, as a restart without persistence) while 8 clients draw on a
// balance of 300 with an overdraft of 5 through two api processes, once
// the ledger holds 220 units of it; the processes' snapshots still hold
// the consumption of before the first draw. No check draws on that stale
// figure: until the drainer has made the counter from the ledger, checks
// are answered unavailable (and retried); then the balance is drawn
// exactly to −5 from the ledger's figure. The units
// the clients saw admitted are the ledger's consumption plus those Redis
// lost before the drainer recorded them (read from Redis atomically with
// the flush), the ledger never exceeds granted + overdraft, and the drift
// is 0.
func TestCreditsNeverDrawnTwiceAfterRedisIsFlushed(t *testing.T) {
	ctx := context.Background()
	r := newRig(t, testenv.DatabaseURL(t))
	r.ownRedis(t) // FLUSHALL must not touch other tests'
	const granted, overdraft = 300, 5
	tenantID, key := creditTenant(t, r, "prepaid", credits.ModeDeny, overdraft, granted)
	apis := addrs([]*api{r.startAPI(t), r.startAPI(t)})

	// The drainer, as admin serve runs it, beside the checks; but rather
	// than on a timer it makes a pass whenever asked (kickDrain): after
	// every check the clients make, and while the test waits for the
	// ledger. A client answered unavailable waits for a pass begun after
	// the answer (awaitDrain) before it asks again: only a pass can make
	// the counter. The flush holds the drainer off, so that what Redis
	// holds beyond the ledger's position is exactly what the flush loses.
	var draining sync.Mutex
	d := r.drainer()
	drainCtx, cancelDraining := context.WithCancel(ctx)
	drained := make(chan struct{})
	stopDraining := sync.OnceFunc(func() { cancelDraining(); <-drained })
	defer stopDraining()
	kick := make(chan struct{}, 1)
	kickDrain := func() {
		select {
		case kick <- struct{}{}:
		default: // a pass is asked for already
		}
	}
	var passMu sync.Mutex
	nextPass := make(chan struct{}) // closed when the next pass to begin ends
	awaitDrain := func() {
		passMu.Lock()
		done := nextPass
		passMu.Unlock()
		kickDrain()
		select {
		case <-done:
		case <-drainCtx.Done():
		}
	}
	go func() {
		defer close(drained)
		for {
			select {
			case <-drainCtx.Done():
				return
			case <-kick:
			}
			passMu.Lock()
			done := nextPass
			nextPass = make(chan struct{})
			passMu.Unlock()
			draining.Lock()
			if _, err := d.Drain(drainCtx); err != nil && drainCtx.Err() == nil {
				t.Errorf("drain: %v", err)
			}
			draining.Unlock()
			close(done)
		}
	}()

	// The clients draw until 220 units are admitted and wait there while
	// the drainer records them; then they draw again as fast as they can,
	// and Redis is flushed a moment into it: by the client whose check is
	// the 230th admitted, at once, while the others' are in flight.
	client := &http.Client{Timeout: 30 * time.Second}
	var admitted, unavailable atomic.Int64
	var paused atomic.Bool
	resume := make(chan struct{})
	const pauseAt, flushAt = 220, 230
	var flush func() // set before the clients resume
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				if paused.Load() {
					<-resume
				}
				res, err := checkReason(client, apis[i%len(apis)], r.token, map[string]any{"key": key, "resource": "GET /x", "cost": 1})
				kickDrain()
				switch {
				case err != nil:
					t.Errorf("check: %v", err)
					return
				case res.Allowed:
					switch admitted.Add(1) {
					case pauseAt:
						paused.Store(true)
					case flushAt:
						flush()
					}
				case res.Reason == tollgate.ReasonCreditsExhausted:
					return
				case res.Reason == tollgate.ReasonUnavailable:
					unavailable.Add(1)
					awaitDrain()
				default:
					t.Errorf("denied for %s", res.Reason)
					return
				}
			}
		}()
	}
	testenv.Eventually(t, time.Now(), 60*time.Second, "the first draws in the ledger", func() (bool, string) {
		kickDrain()
		acct, err := credits.NewStore(r.db).Account(ctx, tenantID)
		testenv.Must(t, err)
		return paused.Load() && acct.Consumed == admitted.Load(), fmt.Sprint(admitted.Load(), " admitted, ledger ", acct.Consumed)
	})
	// The drainer is held off from before the clients resume until after
	// the flush, so the ledger's position read here is the one at the
	// flush; Redis is flushed once a few more units are admitted: well
	// before the balance runs out, however fast the checks go.
	draining.Lock()
	acct, err := credits.NewStore(r.db).Account(ctx, tenantID)
	if err != nil {
		draining.Unlock()
		t.Fatal(err)
	}
	_, logKey := credits.Keys(r.env["TOLLGATE_KEY_PREFIX"], tenantID)
	var lost, seenAtFlush int64
	flushed := make(chan struct{})
	flush = func() {
		defer close(flushed)
		var unrecorded *redis.XMessageSliceCmd
		_, err := r.redis.TxPipelined(ctx, func(p redis.Pipeliner) error {
			unrecorded = p.XRange(ctx, logKey, "("+acct.Position, "+")
			p.FlushAll(ctx)
			return nil
		})
		seenAtFlush = admitted.Load()
		if err != nil {
			t.Errorf("flush: %v", err)
			return
		}
		for _, e := range unrecorded.Val() {
			u, err := strconv.ParseInt(fmt.Sprint(e.Values["u"]), 10, 64)
			if err != nil {
				t.Errorf("unrecorded entry %v: %v", e.Values, err)
				return
			}
			lost += u
		}
	}
	paused.Store(false)
	close(resume)
	select {
	case <-flushed:
	case <-time.After(30 * time.Second):
		draining.Unlock()
		t.Fatalf("%d admitted: the clients did not go on", admitted.Load())
	}
	draining.Unlock()
	if t.Failed() {
		t.FailNow()
	}
	if seenAtFlush >= granted {
		t.Fatalf("%d admitted by the flush: it did not land mid-consumption", seenAtFlush)
	}
	wg.Wait()
	stopDraining()

	acct = r.ledgerAgrees(t, tenantID)
	t.Logf("admitted %d (%d by the flush), %d of them lost with Redis before the ledger had them; %d checks answered unavailable meanwhile; ledger consumed %d",
		admitted.Load(), seenAtFlush, lost, unavailable.Load(), acct.Consumed)
	if acct.Consumed != granted+overdraft || acct.Balance() != -overdraft {
		t.Errorf("ledger consumed %d, balance %d; want %d and −%d", acct.Consumed, acct.Balance(), granted+overdraft, overdraft)
	}
	if admitted.Load() != acct.Consumed+lost {
		t.Errorf("clients saw %d admitted; the ledger has %d and Redis lost %d unrecorded", admitted.Load(), acct.Consumed, lost)
	}
}

// TestCreditsInSingleProcessMode: with TOLLGATE_STORE=memory the api
// process keeps the balances and runs the credits drainer itself: it
// makes the counter from the ledger, 60 draws on a balance of 50 admit
// exactly 50, and once the process stops the ledger has them all.
func TestCreditsInSingleProcessMode(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	tenantID, key := creditTenant(t, r, "prepaid", credits.ModeDeny, 0, 50)
	r.env["TOLLGATE_STORE"] = "memory"
	r.env["TOLLGATE_USAGE_SINK"] = "none"
	a := r.startAPI(t)
	client := &http.Client{Timeout: 10 * time.Second}
	var admitted, exhausted int
	began := time.Now()
	for range 60 {
		// Unavailable until the drainer's first pass has made the
		// counter: the check is asked again until it is answered.
		testenv.Eventually(t, began, 10*time.Second, "the balance known: the drainer making its counter", func() (bool, string) {
			d, err := checkReason(client, a.addr, r.token, map[string]any{"key": key, "resource": "GET /x", "cost": 1})
			testenv.Must(t, err)
			if d.Reason == tollgate.ReasonUnavailable {
				return false, "answered unavailable"
			}
			if d.Allowed {
				admitted++
			} else if d.Reason == tollgate.ReasonCreditsExhausted {
				exhausted++
			}
			return true, ""
		})
	}
	testenv.Must(t, a.stop())
	acct, err := credits.NewStore(r.db).Account(context.Background(), tenantID)
	testenv.Must(t, err)
	if admitted != 50 || exhausted != 10 || acct.Consumed != 50 || acct.Balance() != 0 {
		t.Errorf("%d admitted, %d credits_exhausted; ledger consumed %d, balance %d; want 50, 10, 50, 0",
			admitted, exhausted, acct.Consumed, acct.Balance())
	}
}

// TestSettlementDrawsOnTheBalanceNow: a hold settled above its estimate
// draws on the balance as the api process's snapshot has it at the
// settlement, not as it stood when the hold was opened. After a top-up
// (overage mode) the units taken come from the new balance, none of them
// overage; after a negative adjustment (deny mode, overdraft 5) they are
// drawn down to −5 and the rest goes unpaid, never below.
func TestSettlementDrawsOnTheBalanceNow(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	ctx := context.Background()
	topped, toppedKey := creditTenant(t, r, "prepaid-topped", credits.ModeOverage, 0, 100)
	adjusted, adjustedKey := creditTenant(t, r, "prepaid-adjusted", credits.ModeDeny, 5, 100)
	a := r.startAPI(t)
	client := &http.Client{Timeout: 10 * time.Second}
	type answer struct {
		Allowed bool                   `json:"allowed"`
		HoldID  string                 `json:"hold_id"`
		Credits *enforce.CreditsResult `json:"credits"`
	}
	check := func(key string, cost int64, hold bool) answer {
		t.Helper()
		var d answer
		testenv.Must(t, postJSON(client, "http://"+a.addr+"/v1/check", r.token,
			map[string]any{"key": key, "resource": "GET /x", "cost": cost, "hold": hold}, &d))
		return d
	}
	ops := credits.NewOps(r.db, nil)
	for _, tc := range []struct {
		name, tenant, key string
		estimate          int64
		change            func() error
		// seen is the balance a check reports once the snapshot has the
		// change; the hold is then settled at cost, leaving the ledger
		// at consumed and balance.
		seen, cost, consumed, balance int64
	}{
		{"top-up", topped, toppedKey, 90, func() error {
			_, err := ops.Grant(ctx, audit.CLI, topped, credits.GrantInput{Amount: 100, Cause: "top-up"})
			return err
		}, 110, 150, 150, 50},
		{"negative adjustment", adjusted, adjustedKey, 60, func() error {
			_, err := ops.Adjust(ctx, audit.CLI, adjusted, credits.AdjustInput{Units: -30, Cause: "correction"})
			return err
		}, 10, 80, 75, -5},
	} {
		d := check(tc.key, tc.estimate, true)
		if !d.Allowed || d.HoldID == "" || d.Credits == nil || d.Credits.Drawn != tc.estimate {
			t.Fatalf("%s: hold of %d: %+v (credits %+v)", tc.name, tc.estimate, d, d.Credits)
		}
		testenv.Must(t, tc.change())
		changed := time.Now()
		testenv.Eventually(t, changed, 10*time.Second, tc.name+" seen by the api's snapshot", func() (bool, string) {
			d := check(tc.key, 0, false)
			return d.Credits != nil && d.Credits.Balance == tc.seen, fmt.Sprintf("credits %+v", d.Credits)
		})
		if code, st := settle(t, "http://"+a.addr, r.token, d.HoldID, tc.cost); code != http.StatusOK {
			t.Fatalf("%s: settle at %d: %d %v", tc.name, tc.cost, code, st)
		}
		acct := r.ledgerAgrees(t, tc.tenant)
		if acct.Consumed != tc.consumed || acct.Balance() != tc.balance {
			t.Errorf("%s: held %d, settled at %d: ledger consumed %d, balance %d; want %d and %d",
				tc.name, tc.estimate, tc.cost, acct.Consumed, acct.Balance(), tc.consumed, tc.balance)
		}
	}
}
