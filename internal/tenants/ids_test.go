package tenants_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestMalformedIDsAreNotFoundWithoutAQuery: an ID that is not a UUID names
// nothing; the store says so without asking the database.
func TestMalformedIDsAreNotFoundWithoutAQuery(t *testing.T) {
	ctx := context.Background()
	ts := tenants.NewStore(testenv.NoQueries(t))
	const good = testenv.GoodID
	testenv.WantNotFound(t, func(id string) map[string]error {
		if id != "" { // "" means every tenant's
			if keys, err := ts.ListKeys(ctx, id); err != nil || len(keys) != 0 {
				t.Errorf("ListKeys(%q) = %v, %v; want none", id, keys, err)
			}
			if changes, err := ts.PlanChanges(ctx, id); err != nil || len(changes) != 0 {
				t.Errorf("PlanChanges(%q) = %v, %v; want none", id, changes, err)
			}
		}
		calls := map[string]error{}
		_, calls["Get"] = ts.Get(ctx, id)
		_, calls["GetKey(bad tenant)"] = ts.GetKey(ctx, id, good)
		_, calls["GetKey(bad key)"] = ts.GetKey(ctx, good, id)
		_, calls["KeyByID"] = ts.KeyByID(ctx, id)
		_, calls["RevokeTenantKey(bad tenant)"] = ts.RevokeTenantKey(ctx, id, good)
		_, calls["RevokeTenantKey(bad key)"] = ts.RevokeTenantKey(ctx, good, id)
		calls["RevokeKey"] = ts.RevokeKey(ctx, id)
		_, _, calls["CreateKey"] = ts.CreateKey(ctx, id, tenants.KeySpec{})
		_, calls["UpdateKey"] = ts.UpdateKey(ctx, good, id, tenants.KeyChange{}, time.Now())
		_, _, _, calls["RotateKey"] = ts.RotateKey(ctx, good, id, tenants.Rotation{Grace: time.Hour, Now: time.Now()})
		_, calls["ListKeysPage"] = ts.ListKeysPage(ctx, id, page.First(10))
		_, calls["PlanHistory"] = ts.PlanHistory(ctx, id, page.First(10))
		_, calls["SetStatus"] = ts.SetStatus(ctx, id, tenants.StatusSuspended)
		calls["SetPlan"] = ts.SetPlan(ctx, id, 1, time.Now())
		_, calls["Overrides"] = ts.Overrides(ctx, id)
		_, calls["SetOverrides"] = ts.SetOverrides(ctx, id, []plans.Rule{})
		return calls
	})
}

// TestIDLookupsUseIndexes: with sequential scans priced out, no lookup by
// ID scans a table, as comparing id::text with a parameter would.
func TestIDLookupsUseIndexes(t *testing.T) {
	ctx := context.Background()
	f := setup(t)
	k := f.key(t, tenants.KeySpec{Name: "k"})
	testenv.NoSeqScans(t, f.db, func(tx pgx.Tx) {
		ts := tenants.NewStore(tx)
		_, err := ts.Get(ctx, f.acme.ID)
		testenv.Must(t, err)
		_, err = ts.GetKey(ctx, f.acme.ID, k.ID)
		testenv.Must(t, err)
		_, err = ts.KeyByID(ctx, k.ID)
		testenv.Must(t, err)
		_, err = ts.ListKeysPage(ctx, f.acme.ID, page.First(10))
		testenv.Must(t, err)
		_, err = ts.PlanHistory(ctx, f.acme.ID, page.First(10))
		testenv.Must(t, err)
		_, err = ts.Overrides(ctx, f.acme.ID)
		testenv.Must(t, err)
		_, err = ts.RevokeTenantKey(ctx, f.acme.ID, k.ID)
		testenv.Must(t, err)
		_, err = ts.SetStatus(ctx, f.acme.ID, tenants.StatusSuspended)
		testenv.Must(t, err)
	})
}
