package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/fixture"
	"github.com/tollgate/tollgate/internal/usage"
)

func october(t *testing.T) usage.Month {
	m, err := usage.ParseMonth("2026-10")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func ptr[T any](v T) *T { return &v }

func TestProrateRoundsHalfUp(t *testing.T) {
	month := int64(31 * 24 * time.Hour / time.Microsecond)
	for _, c := range []struct {
		amount, num, den, want int64
	}{
		{3, 1, 2, 2}, // 1.5 → 2
		{1, 1, 2, 1}, // 0.5 → 1
		{5, 1, 4, 1}, // 1.25 → 1
		{7, 3, 4, 5}, // 5.25 → 5
		{7, 5, 8, 4}, // 4.375 → 4
		{9, 5, 6, 8}, // 7.5 → 8
		{0, 1, 3, 0}, // nothing to prorate
		{4900, month, month, 4900},
		{4900, month / 2, month, 2450}, // 15.5 days of 31: exactly half
		{4900, 10 * 24 * 3600 * 1_000_000, month, 1581},     // 1580.645…
		{100_000, 10 * 24 * 3600 * 1_000_000, month, 32258}, // 32258.06…
		{1 << 40, month - 1, month, 1 << 40},                // 2^40 − 0.41: amount × span exceeds int64
		{1 << 40, month / 2, month, 1 << 39},
	} {
		if got := prorate(c.amount, c.num, c.den); got != c.want {
			t.Errorf("prorate(%d, %d, %d) = %d, want %d", c.amount, c.num, c.den, got, c.want)
		}
	}
}

func TestPriceOverage(t *testing.T) {
	graduated := plans.Plan{Tiers: []plans.PriceTier{{UpTo: ptr(int64(10)), UnitMinor: 3}, {UpTo: ptr(int64(50)), UnitMinor: 2}, {UnitMinor: 1}}}
	bounded := plans.Plan{Tiers: []plans.PriceTier{{UpTo: ptr(int64(10)), UnitMinor: 5}, {UpTo: ptr(int64(20)), UnitMinor: 4}}}
	for _, c := range []struct {
		name  string
		plan  plans.Plan
		units int64
		want  int64
		lines string
	}{
		{"flat", plans.Plan{OverageUnitMinor: 7}, 12, 84, "[{1 12 12 7 84}]"},
		{"none", plans.Plan{OverageUnitMinor: 7}, 0, 0, "[]"},
		{"first tier only", graduated, 4, 12, "[{1 4 4 3 12}]"},
		{"tier edge", graduated, 10, 30, "[{1 10 10 3 30}]"},
		{"second tier", graduated, 11, 32, "[{1 10 10 3 30} {11 11 1 2 2}]"},
		{"all tiers", graduated, 66, 30 + 80 + 16, "[{1 10 10 3 30} {11 50 40 2 80} {51 66 16 1 16}]"},
		{"beyond the last bounded tier", bounded, 25, 50 + 4*15, "[{1 10 10 5 50} {11 25 15 4 60}]"},
	} {
		lines, total, err := priceOverage(c.plan, c.units)
		if err != nil {
			t.Fatal(err)
		}
		got := fmt.Sprint(lines)
		if total != c.want || got != c.lines {
			t.Errorf("%s: total %d lines %s; want %d %s", c.name, total, got, c.want, c.lines)
		}
	}
	if _, _, err := priceOverage(plans.Plan{OverageUnitMinor: 1 << 40}, 1<<40); tollgate.ErrorCode(err) != tollgate.EINVALID {
		t.Errorf("overflow: err %v, want EINVALID", err)
	}
}

var (
	proPlan = plans.Plan{ID: 1, Name: "pro", Currency: "USD", BaseFeeMinor: 4900, IncludedUnits: 100_000,
		OverageUnitMinor: 1}
	scalePlan = plans.Plan{ID: 2, Name: "scale", Currency: "USD", BaseFeeMinor: 10_000, IncludedUnits: 50_000,
		Tiers: []plans.PriceTier{{UpTo: ptr(int64(10_000)), UnitMinor: 3}, {UpTo: ptr(int64(50_000)), UnitMinor: 2}, {UnitMinor: 1}}}
	euroPlan = plans.Plan{ID: 3, Name: "euro", Currency: "EUR", BaseFeeMinor: 100}
	byID     = map[int64]plans.Plan{1: proPlan, 2: scalePlan, 3: euroPlan}
)

func TestBuildStatementProratesAPlanChange(t *testing.T) {
	m := october(t)
	var hours []HourUnits
	for d := 1; d <= 10; d++ { // 4,000 units a day on pro
		hours = append(hours, HourUnits{time.Date(2026, 10, d, 12, 0, 0, 0, time.UTC), 4000})
	}
	hours = append(hours,
		HourUnits{mustTime(t, "2026-10-10T23:00:00Z"), 1}, // last hour on pro
		HourUnits{mustTime(t, "2026-10-11T00:00:00Z"), 1}, // first hour on scale
		HourUnits{mustTime(t, "2026-10-20T12:00:00Z"), 100_000},
	)
	st, err := BuildStatement(StatementInput{
		Tenant: tenants.Tenant{ID: tA, Name: "acme"}, Month: m, Plans: byID, Hours: hours,
		History: []tenants.PlanChange{
			{ID: 7, PlanID: 2, EffectiveAt: mustTime(t, "2026-10-11T00:00:00Z")},
			{ID: 3, PlanID: 1, EffectiveAt: mustTime(t, "2026-08-01T00:00:00Z")},
			{ID: 9, PlanID: 2, EffectiveAt: mustTime(t, "2026-11-05T00:00:00Z")}, // after the month
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Plans) != 2 {
		t.Fatalf("%d plan periods, want 2: %+v", len(st.Plans), st.Plans)
	}
	pro, scale := st.Plans[0], st.Plans[1]
	// pro for 10 of 31 days: base 4900 × 10/31 = 1580.645… → 1581; included
	// 100,000 × 10/31 = 32,258.06… → 32,258; used 40,001 → 7,743 × 1.
	check := func(name string, got, want int64) {
		t.Helper()
		if got != want {
			t.Errorf("%s = %d, want %d", name, got, want)
		}
	}
	check("pro base", pro.BaseFeeMinor, 1581)
	check("pro included", pro.IncludedUnits, 32_258)
	check("pro used", pro.UsedUnits, 40_001)
	check("pro overage units", pro.OverageUnits, 7_743)
	check("pro overage", pro.OverageMinor, 7_743)
	check("pro span", pro.SpanUS, 10*24*3600*1_000_000)
	// scale for 21 of 31 days: base 10,000 × 21/31 = 6,774.19… → 6,774;
	// included 50,000 × 21/31 = 33,870.97… → 33,871; used 100,001 → 66,130
	// overage: 10,000 × 3 + 40,000 × 2 + 16,130 × 1 = 126,130.
	check("scale base", scale.BaseFeeMinor, 6774)
	check("scale included", scale.IncludedUnits, 33_871)
	check("scale used", scale.UsedUnits, 100_001)
	check("scale overage units", scale.OverageUnits, 66_130)
	check("scale overage", scale.OverageMinor, 126_130)
	if got := fmt.Sprint(scale.Overage); got != "[{1 10000 10000 3 30000} {10001 50000 40000 2 80000} {50001 66130 16130 1 16130}]" {
		t.Errorf("scale overage lines %s", got)
	}
	check("base fees", st.BaseFeeMinor, 1581+6774)
	check("overage", st.OverageMinor, 7743+126_130)
	check("total", st.TotalMinor, 1581+6774+7743+126_130)
	if st.Currency != "USD" || st.Status != "open" || st.Rules != RulesText {
		t.Errorf("currency %q status %q", st.Currency, st.Status)
	}
}

func TestBuildStatementTenantStartingMidMonth(t *testing.T) {
	st, err := BuildStatement(StatementInput{
		Tenant: tenants.Tenant{ID: tA, Name: "new"}, Month: october(t), Plans: byID,
		History: []tenants.PlanChange{{ID: 1, PlanID: 1, EffectiveAt: mustTime(t, "2026-10-15T12:00:00Z")}},
		// The creation hour started before the plan: it counts on it.
		Hours: []HourUnits{{mustTime(t, "2026-10-15T12:00:00Z").Add(-time.Hour + 0), 60_000}},
	})
	if err != nil {
		t.Fatal(err)
	}
	// 16.5 of 31 days: 4,900 × 16.5/31 = 2,608.06… → 2,608; included
	// 100,000 × 16.5/31 = 53,225.8… → 53,226; overage 6,774.
	p := st.Plans[0]
	if p.BaseFeeMinor != 2608 || p.IncludedUnits != 53_226 || p.OverageUnits != 6774 || st.TotalMinor != 2608+6774 {
		t.Errorf("got base %d included %d overage %d total %d", p.BaseFeeMinor, p.IncludedUnits, p.OverageUnits, st.TotalMinor)
	}
}

func TestBuildStatementRefusesMixedCurrencies(t *testing.T) {
	_, err := BuildStatement(StatementInput{
		Tenant: tenants.Tenant{ID: tA, Name: "x"}, Month: october(t), Plans: byID,
		History: []tenants.PlanChange{
			{ID: 1, PlanID: 1, EffectiveAt: mustTime(t, "2026-09-01T00:00:00Z")},
			{ID: 2, PlanID: 3, EffectiveAt: mustTime(t, "2026-10-20T00:00:00Z")},
		},
	})
	if tollgate.ErrorCode(err) != tollgate.EINVALID {
		t.Errorf("err %v, want EINVALID", err)
	}
}

// demoMonth stores fixture.DemoPro and applies its month of traffic.
func demoMonth(t *testing.T, s *stores, db *pgxpool.Pool) fixture.DemoPro {
	t.Helper()
	d := fixture.SeedDemoPro(t, db)
	for _, b := range d.MonthOfTraffic() {
		_, err := s.Apply(context.Background(), b)
		testenv.Must(t, err)
	}
	return d
}

func TestDemoProStatementForAMonthOfTraffic(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	d := demoMonth(t, s, db)
	pro, free, key1, key2 := d.Pro, d.Free, d.Key1, d.Key2

	st, err := s.Statement(ctx, pro.ID, october(t))
	if err != nil {
		t.Fatal(err)
	}
	// 31 days × 24 hours × (150 + 30) units = 133,920 allowed units; pro
	// includes 100,000, so 33,920 overage units at 1 cent; base fee 4,900
	// for the whole month.
	want := Statement{
		TenantID: pro.ID, TenantName: "demo-pro", Month: "2026-10", Currency: "USD", Status: "open",
		PeriodStart: mustTime(t, "2026-10-01T00:00:00Z"), PeriodEnd: mustTime(t, "2026-11-01T00:00:00Z"),
		Usage:        metering.Counts{Allowed: 31 * 24 * 165, Denied: 31 * 24 * 15, AllowedUnits: 133_920, DeniedUnits: 31 * 24 * 20},
		BaseFeeMinor: 4900, OverageMinor: 33_920, TotalMinor: 38_820, Rules: RulesText,
	}
	lines := []UsageLine{
		{KeyID: key1.ID, KeyPrefix: key1.Prefix, KeyName: "web", Resource: "GET /repos",
			Counts: metering.Counts{Allowed: 111_600, Denied: 7_440, AllowedUnits: 111_600, DeniedUnits: 7_440}},
		{KeyID: key2.ID, KeyPrefix: key2.Prefix, KeyName: "batch", Resource: "POST /v1/search",
			Counts: metering.Counts{Allowed: 11_160, Denied: 3_720, AllowedUnits: 22_320, DeniedUnits: 7_440}},
	}
	if key2.ID < key1.ID {
		lines[0], lines[1] = lines[1], lines[0]
	}
	proPlanID := st.Plans[0].PlanID
	want.Lines = lines
	want.Plans = []PlanCharges{{
		Plan: "pro", PlanID: proPlanID, From: want.PeriodStart, To: want.PeriodEnd,
		SpanUS: 31 * 24 * 3600 * 1_000_000, MonthUS: 31 * 24 * 3600 * 1_000_000,
		PlanBaseFeeMinor: 4900, BaseFeeMinor: 4900, PlanIncludedUnits: 100_000, IncludedUnits: 100_000,
		UsedUnits: 133_920, OverageUnits: 33_920,
		Overage:      []OverageLine{{FromUnit: 1, ToUnit: 33_920, Units: 33_920, UnitMinor: 1, AmountMinor: 33_920}},
		OverageMinor: 33_920, TotalMinor: 38_820,
	}}
	gotJSON, _ := json.MarshalIndent(st, "", "  ")
	wantJSON, _ := json.MarshalIndent(want, "", "  ")
	if !bytes.Equal(gotJSON, wantJSON) {
		t.Errorf("statement\n got %s\nwant %s", gotJSON, wantJSON)
	}
	// The JSON names finance reads.
	var doc map[string]any
	_ = json.Unmarshal(gotJSON, &doc)
	for _, field := range []string{"tenant_id", "month", "currency", "usage_by_key_and_resource", "plan_periods",
		"base_fee_minor", "overage_minor", "total_minor", "rules"} {
		if _, ok := doc[field]; !ok {
			t.Errorf("statement JSON has no %q", field)
		}
	}

	var csvOut strings.Builder
	if err := WriteCSV(&csvOut, []Statement{st}); err != nil {
		t.Fatal(err)
	}
	head := pro.ID + ",demo-pro,2026-10,open,USD,"
	span := "pro,2026-10-01T00:00:00Z,2026-11-01T00:00:00Z,"
	usage := func(l UsageLine) string {
		return fmt.Sprintf("%susage,,,,%s,%s,%s,%d,%d,%d,%d,,\n", head, l.KeyID, l.KeyPrefix, l.Resource,
			l.Allowed, l.Denied, l.AllowedUnits, l.DeniedUnits)
	}
	wantCSV := strings.Join(CSVHeader, ",") + "\n" +
		usage(lines[0]) + usage(lines[1]) +
		head + "base_fee," + span + ",,,,,,,,4900\n" +
		head + "included," + span + ",,,,,100000,,,\n" +
		head + "used," + span + ",,,,,133920,,,\n" +
		head + "overage," + span + ",,,,,33920,,1,33920\n" +
		head + "total,,,,,,,,,,,,38820\n"
	if csvOut.String() != wantCSV {
		t.Errorf("CSV\n got:\n%s\nwant:\n%s", csvOut.String(), wantCSV)
	}

	// demo-free: 31 × 24 × 7 = 5,208 units; 1,000 included, no overage price.
	fst, err := s.Statement(ctx, free.ID, october(t))
	if err != nil {
		t.Fatal(err)
	}
	if fst.Usage.AllowedUnits != 5208 || fst.TotalMinor != 0 || fst.Plans[0].OverageUnits != 4208 {
		t.Errorf("demo-free: units %d overage %d total %d", fst.Usage.AllowedUnits, fst.Plans[0].OverageUnits, fst.TotalMinor)
	}
}

func TestCloseMonthFreezesStatements(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	d := demoMonth(t, s, db)
	pro, key1 := d.Pro, d.Key1
	m := october(t)

	if _, err := s.CloseMonth(ctx, audit.CLI, usage.MonthOf(mustTime(t, "2026-11-01T00:00:00Z")), nil); tollgate.ErrorCode(err) != tollgate.EINVALID {
		t.Errorf("closing the current month: err %v, want EINVALID", err)
	}
	var progress []string
	res, err := s.CloseMonth(ctx, audit.CLI, m, func(done, total int) { progress = append(progress, fmt.Sprintf("%d/%d", done, total)) })
	if err != nil {
		t.Fatal(err)
	}
	if res.AlreadyClosed || res.Statements != 2 || res.TotalMinor["USD"] != 38_820 {
		t.Errorf("close: %+v", res)
	}
	if got := strings.Join(progress, " "); got != "0/2 1/2 2/2" {
		t.Errorf("progress %q", got)
	}
	again, err := s.CloseMonth(ctx, audit.CLI, m, nil)
	if err != nil || !again.AlreadyClosed || again.Statements != 2 || again.TotalMinor["USD"] != 38_820 ||
		!again.ClosedAt.Equal(res.ClosedAt) {
		t.Errorf("closing again: %+v, %v; want a no-op", again, err)
	}

	// Late usage: counted in the usage tables and listed, not billed.
	late, err := s.Apply(ctx, metering.Batch{Version: 1, ID: "late:1", Rows: []metering.Row{
		row(at(t, "2026-10-31T23:59"), pro.ID, key1.ID, "GET /repos", metering.Counts{Allowed: 500, AllowedUnits: 500}),
		row(at(t, "2026-11-02T10:00"), pro.ID, key1.ID, "GET /repos", metering.Counts{Allowed: 1, AllowedUnits: 1}),
	}})
	if err != nil || late.LateRows != 1 {
		t.Fatalf("late apply: %+v, %v; want 1 late row", late, err)
	}
	st, err := s.Statement(ctx, pro.ID, m)
	if err != nil {
		t.Fatal(err)
	}
	if st.Status != "closed" || st.ClosedAt == nil || st.TotalMinor != 38_820 || st.Usage.AllowedUnits != 133_920 {
		t.Errorf("closed statement changed: status %s total %d units %d", st.Status, st.TotalMinor, st.Usage.AllowedUnits)
	}
	if st.Late == nil || st.Late.AllowedUnits != 500 {
		t.Errorf("late usage on the statement: %+v, want 500 units", st.Late)
	}
	rows, err := s.Late(ctx, m, pro.ID)
	if err != nil || len(rows) != 1 || rows[0].BatchID != "late:1" || rows[0].AllowedUnits != 500 || rows[0].KeyID != key1.ID {
		t.Errorf("late rows %+v, %v", rows, err)
	}
	all, err := s.Statements(ctx, m, nil)
	if err != nil || len(all) != 2 || all[0].TenantName != "demo-free" || all[1].Late == nil {
		t.Errorf("closed statements: %d, %v", len(all), err)
	}
	// Frozen in the database too.
	if _, err := db.Exec(ctx, `UPDATE statements SET total_minor = 0`); err == nil {
		t.Error("a closed statement could be updated")
	}
	// A tenant without a statement in a closed month (it joined later)
	// has the zero statement it had while the month was open, closed.
	newcomer, err := s.tenants.Create(ctx, "newcomer", st.Plans[0].PlanID)
	if err != nil {
		t.Fatal(err)
	}
	zero, err := s.Statement(ctx, newcomer.ID, m)
	if err != nil {
		t.Fatalf("newcomer's closed October: %v", err)
	}
	if zero.Status != "closed" || zero.ClosedAt == nil || !zero.ClosedAt.Equal(res.ClosedAt) || zero.TotalMinor != 0 ||
		zero.Usage != (metering.Counts{}) || len(zero.Lines) != 0 || len(zero.Plans) != 0 || zero.TenantName != "newcomer" ||
		zero.Month != "2026-10" {
		t.Errorf("newcomer's closed October: %+v, want a zero closed statement", zero)
	}
}

// TestCloseMonthWaitsForAPlanChangeInFlight: a plan change whose
// transaction has checked the closed months but not committed holds the
// close back; the close then bills the change, so the frozen statement
// and the plan history agree.
func TestCloseMonthWaitsForAPlanChangeInFlight(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	pro := demoMonth(t, s, db).Pro
	ent, err := s.plans.GetByName(ctx, "enterprise")
	testenv.Must(t, err)

	tx, err := db.Begin(ctx)
	testenv.Must(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck
	testenv.Must(t, tenants.NewStore(tx).SetPlan(ctx, pro.ID, ent.ID, mustTime(t, "2026-10-16T00:00:00Z")))

	closed := make(chan error, 1)
	go func() { _, err := s.CloseMonth(ctx, audit.CLI, october(t), nil); closed <- err }()
	select {
	case err := <-closed:
		t.Fatalf("the close finished (%v) while a plan change for the month was in flight", err)
	case <-time.After(300 * time.Millisecond):
	}
	testenv.Must(t, tx.Commit(ctx))
	testenv.Must(t, <-closed)
	st, err := s.Statement(ctx, pro.ID, october(t))
	testenv.Must(t, err)
	if len(st.Plans) != 2 || st.Plans[1].Plan != "enterprise" {
		t.Errorf("frozen statement spans %+v, want pro then enterprise", st.Plans)
	}
}

// TestStatementListsExpiredHolds: holds that expired unsettled are
// counted apart, with the units charged on expiry, and those units are
// billed like any other; settled holds count their settled units only.
func TestStatementListsExpiredHolds(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	d := fixture.SeedDemoPro(t, db)
	pro, key1 := d.Pro, d.Key1
	m := at(t, "2026-10-05T10:00")
	expired := func(units, holds int64) metering.Row {
		return metering.Row{Minute: m, TenantID: pro.ID, KeyID: key1.ID, Tier: "authenticated", Resource: "POST /v1/complete",
			Reason: tollgate.ReasonHoldExpired, Counts: metering.Counts{AllowedUnits: units, ExpiredHolds: holds}}
	}
	_, err := s.Apply(ctx, metering.Batch{Version: 1, ID: "holds:1", Rows: []metering.Row{
		// 5 holds opened; 2 settled at 300 units in all; 3 expired, one of
		// them charged its estimate of 400.
		row(m, pro.ID, key1.ID, "POST /v1/complete", metering.Counts{Allowed: 5, AllowedUnits: 300}),
		expired(400, 3),
	}})
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Statement(ctx, pro.ID, october(t))
	if err != nil {
		t.Fatal(err)
	}
	if st.Usage.Allowed != 5 || st.Usage.AllowedUnits != 700 || st.Usage.ExpiredHolds != 3 || st.ExpiredHoldUnits != 400 {
		t.Errorf("usage %+v, expired hold units %d; want 5 checks, 700 units, 3 expired holds charged 400", st.Usage, st.ExpiredHoldUnits)
	}
}

// TestStatementPricesCredits: units drawn from a prepaid balance are not
// billed; units admitted past it are overage, priced with the plan's
// overage pricing like any other overage and put in the total; units
// settled past it in deny mode are shown as unpaid and not billed; units
// admitted without drawing on the balance (while Redis was down) are
// billed as usage. Each plan span prices the credit hours that started
// in it, and the CSV has the credit lines.
func TestStatementPricesCredits(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	metered, err := s.plans.Put(ctx, plans.Plan{Name: "metered", Currency: "USD", OverageUnitMinor: 3})
	testenv.Must(t, err)
	dearer, err := s.plans.Put(ctx, plans.Plan{Name: "dearer", Currency: "USD", BaseFeeMinor: 100, OverageUnitMinor: 5})
	testenv.Must(t, err)
	tn, err := s.tenants.Create(ctx, "prepaid", metered.ID)
	testenv.Must(t, err)
	_, key, err := s.tenants.IssueKey(ctx, tn.ID, "web", nil)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z' WHERE tenant_id = $1`, tn.ID)
	testenv.Must(t, err)
	testenv.Must(t, s.tenants.SetPlan(ctx, tn.ID, dearer.ID, mustTime(t, "2026-10-16T00:00:00Z")))

	// Usage: 1,070 units on the metered plan (1,000 that drew on the
	// balance, 20 of a hold settled past it, 50 admitted while the balance
	// could not be drawn), 10 on the dearer one.
	_, err = s.Apply(ctx, metering.Batch{Version: 1, ID: "credits:1", Rows: []metering.Row{
		row(at(t, "2026-10-05T10:17"), tn.ID, key.ID, "GET /x", metering.Counts{Allowed: 1000, AllowedUnits: 1000}),
		row(at(t, "2026-10-06T09:00"), tn.ID, key.ID, "GET /x", metering.Counts{Allowed: 50, AllowedUnits: 50}),
		row(at(t, "2026-10-07T08:00"), tn.ID, key.ID, "GET /x", metering.Counts{Allowed: 1, AllowedUnits: 20}),
		row(at(t, "2026-10-20T12:00"), tn.ID, key.ID, "GET /x", metering.Counts{Allowed: 10, AllowedUnits: 10}),
	}})
	testenv.Must(t, err)
	// The ledger: 700 granted and drawn on the 5th; 300 past the balance
	// then; 20 unpaid on the 7th; 10 past the balance on the 20th.
	_, err = db.Exec(ctx, `INSERT INTO credit_accounts (tenant_id, line, consumed) VALUES ($1, 700, 700)`, tn.ID)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `INSERT INTO credit_ledger (tenant_id, kind, units, balance, cause, entry, at) VALUES
		($1, 'grant', 700, 700, 'pack', NULL, '2026-10-01T00:00:00Z'),
		($1, 'consumption', -650, 50, 'check', '1-0', '2026-10-05T10:17:00Z'),
		($1, 'consumption', -50, 0, 'check', '2-0', '2026-10-05T10:59:59Z')`, tn.ID)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `INSERT INTO credit_hours (tenant_id, hour, overage, unpaid) VALUES
		($1, '2026-10-05T10:00:00Z', 300, 0), ($1, '2026-10-07T08:00:00Z', 0, 20), ($1, '2026-10-20T12:00:00Z', 10, 0)`, tn.ID)
	testenv.Must(t, err)

	st, err := s.Statement(ctx, tn.ID, october(t))
	testenv.Must(t, err)
	if len(st.Plans) != 2 {
		t.Fatalf("plan spans %+v", st.Plans)
	}
	m, d := st.Plans[0], st.Plans[1]
	// Metered: 1,070 used, 1,020 of them on the balance (700 drawn, 300
	// past it, 20 unpaid): 50 billed as usage + 300 overage = 350 × 3.
	if m.UsedUnits != 1070 || m.CreditUnits != 1020 || m.CreditOverageUnits != 300 || m.OverageUnits != 350 || m.OverageMinor != 1050 {
		t.Errorf("metered span: used %d, credit %d, credit overage %d, overage %d units %d minor; want 1070, 1020, 300, 350, 1050",
			m.UsedUnits, m.CreditUnits, m.CreditOverageUnits, m.OverageUnits, m.OverageMinor)
	}
	// Dearer, 16 of 31 days: base 100 × 16/31 → 52; 10 used, all past the
	// balance: 10 × 5 = 50.
	if d.UsedUnits != 10 || d.CreditUnits != 10 || d.CreditOverageUnits != 10 || d.OverageUnits != 10 || d.OverageMinor != 50 || d.BaseFeeMinor != 52 {
		t.Errorf("dearer span: %+v", d)
	}
	if st.OverageMinor != 1100 || st.TotalMinor != 1152 {
		t.Errorf("overage %d, total %d; want 1100 and 1152", st.OverageMinor, st.TotalMinor)
	}
	if c := st.Credits; c == nil || *c != (credits.Month{Granted: 700, Used: 700, Overage: 310, Unpaid: 20}) {
		t.Errorf("credits %+v", st.Credits)
	}

	var csvOut strings.Builder
	testenv.Must(t, WriteCSV(&csvOut, []Statement{st}))
	head := tn.ID + ",prepaid,2026-10,open,USD,"
	for _, line := range []string{
		head + "credit_units,metered,2026-10-01T00:00:00Z,2026-10-16T00:00:00Z,,,,,,1020,,,",
		head + "credit_overage,metered,2026-10-01T00:00:00Z,2026-10-16T00:00:00Z,,,,,,300,,,",
		head + "overage,metered,2026-10-01T00:00:00Z,2026-10-16T00:00:00Z,,,,,,350,,3,1050",
		head + "credit_overage,dearer,2026-10-16T00:00:00Z,2026-11-01T00:00:00Z,,,,,,10,,,",
		head + "credits_granted,,,,,,,,,700,,,",
		head + "credits_used,,,,,,,,,700,,,",
		head + "credits_overage,,,,,,,,,310,,,",
		head + "credits_unpaid,,,,,,,,,20,,,",
		head + "total,,,,,,,,,,,,1152",
	} {
		if !strings.Contains(csvOut.String(), line+"\n") {
			t.Errorf("CSV has no line %s:\n%s", line, csvOut.String())
		}
	}
}

// TestBaseFeesPastInt64FailTheClose: a month split in halves between two
// plans of the largest base fee has base fees of 2^62 + 2^62, past int64:
// the statement is refused (EINVALID) and the close with it, rather than
// wrapping to a negative total.
func TestBaseFeesPastInt64FailTheClose(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	a := fixture.Plan(t, db, plans.Plan{Name: "a", BaseFeeMinor: math.MaxInt64})
	b := fixture.Plan(t, db, plans.Plan{Name: "b", BaseFeeMinor: math.MaxInt64})
	tn := fixture.Tenant(t, db, "acme", a.ID)
	_, err := db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z' WHERE tenant_id = $1`, tn.ID)
	testenv.Must(t, err)
	testenv.Must(t, tenants.NewStore(db).SetPlan(ctx, tn.ID, b.ID, mustTime(t, "2026-10-16T12:00:00Z")))

	if st, err := s.Statement(ctx, tn.ID, october(t)); tollgate.ErrorCode(err) != tollgate.EINVALID {
		t.Errorf("statement: total %d, %v; want EINVALID", st.TotalMinor, err)
	}
	_, err = s.CloseMonth(ctx, audit.CLI, october(t), nil)
	if tollgate.ErrorCode(err) != tollgate.EINVALID || !strings.Contains(err.Error(), "acme") {
		t.Errorf("close: %v; want EINVALID naming acme", err)
	}
	if at, err := usage.ClosedAt(ctx, db, october(t)); err != nil || at != nil {
		t.Errorf("October closed at %v (%v) after a refused close", at, err)
	}
}

// TestCloseNamesEveryTenantItCannotPrice: statements that cannot be
// priced (a history that mixes currencies in the month, written before
// plan changes were checked for it; base fees past int64) do not hide
// one another: the refused close names every such tenant, and closes
// nothing, for them or for the tenants whose statements are fine.
func TestCloseNamesEveryTenantItCannotPrice(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	usd := fixture.Plan(t, db, plans.Plan{Name: "usd", BaseFeeMinor: 4900})
	eur := fixture.Plan(t, db, plans.Plan{Name: "eur", Currency: "EUR", BaseFeeMinor: 4500})
	huge := fixture.Plan(t, db, plans.Plan{Name: "huge", BaseFeeMinor: math.MaxInt64})
	huger := fixture.Plan(t, db, plans.Plan{Name: "huger", BaseFeeMinor: math.MaxInt64})
	fine := fixture.Tenant(t, db, "acme", usd.ID)
	mixed := fixture.Tenant(t, db, "globex", usd.ID)
	past := fixture.Tenant(t, db, "initech", huge.ID)
	_, err := db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z'`)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `INSERT INTO tenant_plan_changes (tenant_id, plan_id, effective_at) VALUES ($1, $2, '2026-10-15T00:00:00Z')`,
		mixed.ID, eur.ID)
	testenv.Must(t, err)
	_, err = db.Exec(ctx, `UPDATE tenants SET plan_id = $2 WHERE id = $1`, mixed.ID, eur.ID)
	testenv.Must(t, err)
	testenv.Must(t, tenants.NewStore(db).SetPlan(ctx, past.ID, huger.ID, mustTime(t, "2026-10-16T12:00:00Z")))

	_, err = s.CloseMonth(ctx, audit.CLI, october(t), nil)
	msg := tollgate.ErrorMessage(err)
	if tollgate.ErrorCode(err) != tollgate.EINVALID || !strings.Contains(msg, "globex") || !strings.Contains(msg, "initech") ||
		strings.Contains(msg, "acme") || !strings.Contains(msg, "not closed") {
		t.Errorf("close: %v; want EINVALID naming globex and initech (not acme), and that nothing was closed", err)
	}
	if at, err := usage.ClosedAt(ctx, db, october(t)); err != nil || at != nil {
		t.Errorf("October closed at %v (%v) after a refused close", at, err)
	}
	if _, err := s.Statements(ctx, october(t), nil); !strings.Contains(tollgate.ErrorMessage(err), "2 of 3 tenants") {
		t.Errorf("October's open statements: %v, want an error naming 2 of 3 tenants", err)
	}
	if st, err := s.Statement(ctx, fine.ID, october(t)); err != nil || st.TotalMinor != 4900 {
		t.Errorf("acme's October: total %d, %v; want 4900", st.TotalMinor, err)
	}
}

// TestCurrencyChangeAtAMonthStart: a tenant moved to a plan of another
// currency mid-month is refused (the month could not be billed), and at
// the month's start accepted; every month then closes, each statement in
// one currency.
func TestCurrencyChangeAtAMonthStart(t *testing.T) {
	s, db := newStore(t, "2026-12-02T12:00:00Z")
	ctx := context.Background()
	usd := fixture.Plan(t, db, plans.Plan{Name: "usd", BaseFeeMinor: 4900})
	eur := fixture.Plan(t, db, plans.Plan{Name: "eur", Currency: "EUR", BaseFeeMinor: 4500})
	fixture.Tenant(t, db, "acme", usd.ID)
	globex := fixture.Tenant(t, db, "globex", usd.ID)
	_, err := db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z'`)
	testenv.Must(t, err)
	ts := tenants.NewStore(db)
	if err := ts.SetPlan(ctx, globex.ID, eur.ID, mustTime(t, "2026-10-15T00:00:00Z")); testenv.Fields(err)["effective_at"] == "" {
		t.Fatalf("globex to EUR from 15 October: %v, want a problem naming effective_at", err)
	}
	testenv.Must(t, ts.SetPlan(ctx, globex.ID, eur.ID, mustTime(t, "2026-11-01T00:00:00Z")))

	for _, c := range []struct {
		month string
		want  map[string]int64
	}{
		{"2026-10", map[string]int64{"USD": 2 * 4900}},
		{"2026-11", map[string]int64{"USD": 4900, "EUR": 4500}},
	} {
		m, err := usage.ParseMonth(c.month)
		testenv.Must(t, err)
		res, err := s.CloseMonth(ctx, audit.CLI, m, nil)
		if err != nil || res.Statements != 2 || !maps.Equal(res.TotalMinor, c.want) {
			t.Errorf("close %s: %+v, %v; want 2 statements totalling %v", c.month, res, err, c.want)
		}
	}
}
