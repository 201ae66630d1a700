package demo

import (
	"context"
	"net/netip"
	"net/url"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
)

// TestDemoWebhooksStayOnTheMachine: every webhook endpoint the demo
// leaves enabled points at a loopback address, never at a name or a
// public address, also in a database an earlier seed left endpoints at a
// public name in; the demo has such endpoints, for the operator and for
// demo-pro, so that the console shows deliveries.
func TestDemoWebhooksStayOnTheMachine(t *testing.T) {
	ctx := context.Background()
	for _, tt := range []struct {
		name  string
		setup func(t *testing.T, es *events.Store)
	}{
		{"fresh", func(*testing.T, *events.Store) {}},
		{"after an earlier seed", func(t *testing.T, es *events.Store) {
			testenv.Must(t, es.EnsureEndpoint(ctx, "", earlierDemoWebhookURL, "demo: every event (no receiver)", time.Now()))
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := testenv.DB(t)
			es := events.NewStore(db)
			tt.setup(t, es)
			for range 2 { // idempotent
				_, err := Seed(ctx, db, audit.CLI, testkeys.SecretKeys(t))
				testenv.Must(t, err)
			}
			list, err := es.Endpoints(ctx, "", page.Request{Limit: 100})
			testenv.Must(t, err)
			owners := map[bool]bool{} // by whether a tenant owns it
			for _, e := range list.Items {
				if e.DisabledAt != nil {
					continue
				}
				u, err := url.Parse(e.URL)
				testenv.Must(t, err)
				if ip, err := netip.ParseAddr(u.Hostname()); err != nil || !ip.IsLoopback() {
					t.Errorf("enabled demo endpoint %s: its host is not a loopback address", e.URL)
				}
				owners[e.TenantID != ""] = true
			}
			if !owners[false] || !owners[true] {
				t.Errorf("enabled endpoints of an operator %v, of a tenant %v; want both", owners[false], owners[true])
			}
		})
	}
}

// TestSeedRestoresDemoPlanSettings: after an operator (or a README
// example) changed the demo plans' credit, quota and billing settings —
// pro put in credit mode, which denies every check of the demo pro key,
// the prepaid plan's credits, thresholds, a spend cap, a dunning grace,
// a top-up price, the prepaid tenant moved off its plan — seed demo puts
// the demo's settings back, each as an audited change, and a seed after
// it changes none of them again.
func TestSeedRestoresDemoPlanSettings(t *testing.T) {
	ctx := context.Background()
	db := testenv.DB(t)
	keys := testkeys.SecretKeys(t)
	seed := func() []string {
		t.Helper()
		var last int64
		testenv.Must(t, db.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM audit_log`).Scan(&last))
		_, err := Seed(ctx, db, audit.CLI, keys)
		testenv.Must(t, err)
		rows, err := db.Query(ctx, `SELECT action FROM audit_log WHERE id > $1 ORDER BY id`, last)
		testenv.Must(t, err)
		actions, err := pgx.CollectRows(rows, pgx.RowTo[string])
		testenv.Must(t, err)
		return actions
	}
	if got := seed(); !slices.Equal(got, []string{"seed.demo"}) {
		t.Errorf("first seed wrote %v, want [seed.demo]", got)
	}
	ps := plans.NewStore(db)
	planID := func(name string) int64 {
		p, err := ps.GetByName(ctx, name)
		testenv.Must(t, err)
		return p.ID
	}
	pro, enterprise, prepaid, free := planID("pro"), planID("enterprise"), planID("prepaid"), planID("free")
	type settings struct {
		credits credits.PlanSettings
		quota   quota.PlanSettings
		billing billing.PlanBilling
	}
	inv := billing.NewInvoicing(db, billing.InvoicingConfig{}, nil)
	read := func(id int64) settings {
		t.Helper()
		c, err := credits.NewStore(db).PlanSettingsOrOff(ctx, id)
		testenv.Must(t, err)
		q, err := quota.NewStore(db).PlanSettings(ctx, id)
		testenv.Must(t, err)
		b, err := inv.PlanBilling(ctx, id)
		testenv.Must(t, err)
		return settings{c, q, b}
	}
	seeded := map[int64]settings{}
	for _, id := range []int64{pro, enterprise, prepaid, free} {
		seeded[id] = read(id)
	}

	cops, qops := credits.NewOps(db, nil), quota.NewOps(db)
	_, err := cops.SetPlan(ctx, audit.CLI, pro, credits.PlanSettingsInput{Mode: credits.ModeDeny, LowThreshold: 1000})
	testenv.Must(t, err)
	_, err = cops.SetPlan(ctx, audit.CLI, prepaid, credits.PlanSettingsInput{Mode: credits.ModeOverage, Overdraft: 500})
	testenv.Must(t, err)
	capMinor := int64(900)
	_, err = qops.SetPlan(ctx, audit.CLI, enterprise, quota.PlanSettingsInput{Thresholds: []quota.Threshold{{Percent: 50}}})
	testenv.Must(t, err)
	_, err = qops.SetPlan(ctx, audit.CLI, free, quota.PlanSettingsInput{SpendCapMaxMinor: &capMinor})
	testenv.Must(t, err)
	grace, price := int64(72*3600), int64(2)
	_, err = inv.SetPlanBilling(ctx, audit.CLI, pro, billing.PlanBillingInput{DunningGraceS: &grace, TopUpUnitMinor: &price})
	testenv.Must(t, err)
	ts := tenants.NewStore(db)
	prepaidTenant, err := ts.GetByName(ctx, demoPrepaidTenant)
	testenv.Must(t, err)
	testenv.Must(t, ts.SetPlan(ctx, prepaidTenant.ID, free, time.Now()))

	got := seed()
	slices.Sort(got)
	if want := []string{"plan.billing", "plan.credits", "plan.credits", "plan.quota", "plan.quota", "seed.demo"}; !slices.Equal(got, want) {
		t.Errorf("seed after the changes wrote %v, want %v", got, want)
	}
	for _, id := range []int64{pro, enterprise, prepaid, free} {
		got := read(id)
		// The stored thresholds of a plan without them may be [] or null.
		if len(got.quota.Thresholds) == 0 && len(seeded[id].quota.Thresholds) == 0 {
			got.quota.Thresholds = seeded[id].quota.Thresholds
		}
		if !reflect.DeepEqual(got, seeded[id]) {
			t.Errorf("plan %d after the second seed: %+v, want the first seed's %+v", id, got, seeded[id])
		}
	}
	if want := (credits.PlanSettings{PlanID: prepaid, Mode: credits.ModeDeny, LowThreshold: 2000}); seeded[prepaid].credits != want {
		t.Errorf("prepaid plan's credits %+v, want %+v", seeded[prepaid].credits, want)
	}
	// What the check path reads: demo-pro draws on no credits again,
	// demo-prepaid (on its plan again) does.
	hot, err := credits.NewStore(db).LoadAll(ctx)
	testenv.Must(t, err)
	demoPro, err := ts.GetByName(ctx, "demo-pro")
	testenv.Must(t, err)
	if _, ok := hot[demoPro.ID]; ok {
		t.Errorf("demo-pro draws on credits after the seed")
	}
	if _, ok := hot[prepaidTenant.ID]; !ok {
		t.Errorf("demo-prepaid draws on no credits after the seed")
	}

	if got := seed(); !slices.Equal(got, []string{"seed.demo"}) {
		t.Errorf("seed of an unchanged demo wrote %v, want [seed.demo]", got)
	}
}
