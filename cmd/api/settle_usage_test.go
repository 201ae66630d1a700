package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/metering/meteringtest"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
	fixtures "github.com/tollgate/tollgate/internal/testenv/fixture" // fixture names this package's test servers
)

// TestSettledUsageCountsOncePerHold: holds opened through two api
// processes and settled in every way a client may come to settle them;
// once the processes stop and the worker drains the stream, each hold's
// settled units are in every usage table exactly once:
//   - settled on one process, the settlement retried on the other (a
//     client whose first answer timed out; the retry is answered
//     repeated);
//   - settled once, never retried;
//   - settled in the store with its answer lost (no usage handed on, as
//     when the process died or the call timed out after Redis applied
//     it), then retried through the API: the retry's usage counts;
//   - expired by the processes' sweep, charged, then settled by a client
//     too late (a conflict, which hands its usage on again).
func TestSettledUsageCountsOncePerHold(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	ctx := context.Background()
	stored, err := plans.NewStore(r.db).Put(ctx, tokenPlan("held", 1000, plans.Options{}))
	testenv.Must(t, err)
	charged, err := plans.NewStore(r.db).Put(ctx, tokenPlan("charged", 1000, plans.Options{HoldTTLS: 1, HoldExpiry: "charge"}))
	testenv.Must(t, err)
	key, keySums := r.keyWithSums(t, stored.ID, "held")
	expiringKey, expiringSums := r.keyWithSums(t, charged.ID, "charged")

	stopWorker := runWorker(r.worker("w"))
	a, b := r.startAPI(t), r.startAPI(t)
	baseA, baseB := "http://"+a.addr, "http://"+b.addr
	hold := func(base, key string, estimate int) string {
		t.Helper()
		res := post(t, base, r.token, fmt.Sprintf(`{"key":%q,"cost":%d,"hold":true}`, key, estimate))
		id, _ := res.body["hold_id"].(string)
		if res.body["allowed"] != true || id == "" {
			t.Fatalf("hold of %d: %d %v %v", estimate, res.status, res.body, res.problem)
		}
		return id
	}
	settleAs := func(base, id string, cost int64, repeated bool) {
		t.Helper()
		code, st := settle(t, base, r.token, id, cost)
		if code != 200 || st["cost"] != float64(cost) || st["repeated"] != repeated {
			t.Fatalf("settle at %d: %d %v, want 200 with repeated %v", cost, code, st, repeated)
		}
	}

	retried := hold(baseA, key, 60)
	settleAs(baseA, retried, 25, false)
	settleAs(baseB, retried, 25, true)

	once := hold(baseB, key, 60)
	settleAs(baseB, once, 10, false)

	lost := hold(baseA, key, 60)
	store := redisstore.New(r.redis)
	if st, err := store.Settle(ctx, limiter.Settle{Key: holdRecordKey(t, r.env["TOLLGATE_KEY_PREFIX"], lost), Cost: 40}); err != nil ||
		st.Status != limiter.HoldSettled || st.Repeated {
		t.Fatalf("settling in the store: %+v, %v", st, err)
	}
	settleAs(baseB, lost, 40, true)

	late := hold(baseA, expiringKey, 30)
	lateKey := holdRecordKey(t, r.env["TOLLGATE_KEY_PREFIX"], late)
	testenv.WaitFor(t, 15*time.Second, "the hold's expiry by an api process", func() bool {
		// Expired holds leave the index of holds to expire.
		err := r.redis.ZScore(ctx, r.env["TOLLGATE_KEY_PREFIX"]+"holds", lateKey).Err()
		return errors.Is(err, redis.Nil)
	})
	if code, st := settle(t, baseB, r.token, late, 30); code != 409 {
		t.Fatalf("settling an expired hold: %d %v, want 409", code, st)
	}

	testenv.Must(t, a.stop())
	testenv.Must(t, b.stop())
	r.waitDrained(t)
	testenv.Must(t, stopWorker())

	// The checks that opened the holds count as decisions without units;
	// the units are the settled costs 25 + 10 + 40, and the charged 30.
	for _, table := range []string{"usage_minute", "usage_hour", "usage_day", "usage_month"} {
		got := meteringtest.Sums(t, r.db, table)
		if want := (metering.Counts{Allowed: 3, AllowedUnits: 75}); got[keySums] != want {
			t.Errorf("%s: settled holds %+v, want %+v", table, got[keySums], want)
		}
		if want := (metering.Counts{Allowed: 1, AllowedUnits: 30}); got[expiringSums] != want {
			t.Errorf("%s: the hold charged on expiry %+v, want %+v", table, got[expiringSums], want)
		}
	}
	var expired int64
	testenv.Must(t, r.db.QueryRow(ctx, `SELECT coalesce(sum(expired_holds), 0)::int8 FROM usage_month`).Scan(&expired))
	if expired != 1 {
		t.Errorf("%d expired holds in usage_month, want 1", expired)
	}
}

// TestSettledUsageInMemoryModeCountsOncePerHold: in single-process mode
// (memory store, usage applied straight to Postgres) a settlement and its
// retry count the hold once too.
func TestSettledUsageInMemoryModeCountsOncePerHold(t *testing.T) {
	r := newRig(t, testenv.DatabaseURL(t))
	r.env["TOLLGATE_STORE"] = "memory"
	r.env["TOLLGATE_REDIS_ADDR"] = "127.0.0.1:1"
	ctx := context.Background()
	stored, err := plans.NewStore(r.db).Put(ctx, tokenPlan("held", 1000, plans.Options{}))
	testenv.Must(t, err)
	key, sums := r.keyWithSums(t, stored.ID, "held")
	a := r.startAPI(t)
	base := "http://" + a.addr
	res := post(t, base, r.token, fmt.Sprintf(`{"key":%q,"cost":50,"hold":true}`, key))
	id, _ := res.body["hold_id"].(string)
	if id == "" {
		t.Fatalf("hold: %d %v %v", res.status, res.body, res.problem)
	}
	for _, repeated := range []bool{false, true} {
		if code, st := settle(t, base, r.token, id, 20); code != 200 || st["repeated"] != repeated {
			t.Fatalf("settle: %d %v, want repeated %v", code, st, repeated)
		}
	}
	testenv.Must(t, a.stop())
	if got := meteringtest.Sums(t, r.db, "usage_month")[sums]; got != (metering.Counts{Allowed: 1, AllowedUnits: 20}) {
		t.Errorf("usage_month: %+v, want the hold's check and its 20 units once", got)
	}
}

// keyWithSums makes a tenant named name on plan planID and a key of it,
// and returns the key's secret and the name its usage is summed under
// (tenant/key, as meteringtest.Sums names it).
func (r *rig) keyWithSums(t *testing.T, planID int64, name string) (secret, sums string) {
	t.Helper()
	tn := fixtures.Tenant(t, r.db, name, planID)
	secret, k := fixtures.Key(t, r.db, tn.ID, "k")
	return secret, tn.ID + "/" + k.ID
}

// holdRecordKey returns the key of hold id's record under prefix, from the
// hash tag the ID carries (its "g").
func holdRecordKey(t *testing.T, prefix, id string) string {
	t.Helper()
	raw, err := base64.RawURLEncoding.DecodeString(id)
	testenv.Must(t, err)
	var ref struct {
		Tag byte `json:"g"`
	}
	testenv.Must(t, json.Unmarshal(raw, &ref))
	return statekey.HoldKey(prefix, ref.Tag, id)
}
