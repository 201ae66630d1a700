package main

import (
	"context"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestHoldsOnClusterForEveryHashTag: on Redis Cluster a hold's record
// shares its states' hash slot whatever the tenant's hash tag, those of
// 0x80 and above included: the check opens the hold, the settlement
// finds it, and a refund gives the units back.
func TestHoldsOnClusterForEveryHashTag(t *testing.T) {
	ctx := context.Background()
	f := newFixture(t)
	stored, err := plans.NewStore(f.db).Put(ctx, tokenPlan("tags", 100, plans.Options{}))
	testenv.Must(t, err)
	ts := tenants.NewStore(f.db)
	var low, high int
	keys := map[string]byte{}
	for i := 0; low < 2 || high < 2; i++ {
		if i > 200 {
			t.Fatal("no tenants of both halves of the hash tags")
		}
		tn, err := ts.Create(ctx, "tags-"+testenv.RandomID(4), stored.ID)
		testenv.Must(t, err)
		tag, _ := statekey.Compact(tn.ID)
		if tag >= 0x80 && high < 2 {
			high++
		} else if tag < 0x80 && low < 2 {
			low++
		} else {
			continue
		}
		key, _, err := ts.IssueKey(ctx, tn.ID, "k", nil)
		testenv.Must(t, err)
		keys[key] = tag
	}
	_, prefix := testenv.RedisCluster(t)
	base := f.startAPI(t, map[string]string{"TOLLGATE_REDIS_CLUSTER_ADDRS": strings.Join(testenv.RedisClusterAddrs(t), ","),
		"TOLLGATE_KEY_PREFIX": prefix})
	for key, tag := range keys {
		r := post(t, base, f.token, `{"key":"`+key+`","cost":60,"hold":true}`)
		id, _ := r.body["hold_id"].(string)
		if r.body["allowed"] != true || id == "" {
			t.Fatalf("tag %#x: hold of 60: %v", tag, r.body)
		}
		if code, st := settle(t, base, f.token, id, 0); code != 200 || st["status"] != "settled" {
			t.Fatalf("tag %#x: settle at 0: %d %v", tag, code, st)
		}
		if got := remaining(t, base, f.token, key); got != 100 {
			t.Errorf("tag %#x: remaining after a refund = %v, want 100", tag, got)
		}
	}
}
