package billing

import (
	"context"
	"log/slog"
	"testing"

	"github.com/tollgate/tollgate"

	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/usage"
)

// TestMonthlyQuotaThroughTheCheckPath drives checks through the real
// checker (snapshot from Postgres, memory limiter store on an injected
// clock) with the aggregator as its recorder, then bills the month.
func TestMonthlyQuotaThroughTheCheckPath(t *testing.T) {
	s, db := newStore(t, "2026-11-22T12:00:00Z")
	ctx := context.Background()
	ps := plans.NewStore(db)
	hourly := plans.Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS}
	capped, err := ps.Put(ctx, plans.Plan{Name: "capped", BaseFeeMinor: 1000, IncludedUnits: 5,
		OverageUnitMinor: 7, QuotaMode: plans.QuotaHard, Rules: []plans.Rule{hourly}})
	if err != nil {
		t.Fatal(err)
	}
	metered, err := ps.Put(ctx, plans.Plan{Name: "metered", BaseFeeMinor: 1000, IncludedUnits: 5,
		OverageUnitMinor: 7, QuotaMode: plans.QuotaOverage, Rules: []plans.Rule{hourly}})
	if err != nil {
		t.Fatal(err)
	}
	key := func(name string, planID int64) (tenantID, secret string) {
		tn, err := s.tenants.Create(ctx, name, planID)
		if err != nil {
			t.Fatal(err)
		}
		secret, _, err = s.tenants.IssueKey(ctx, tn.ID, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		return tn.ID, secret
	}
	cappedID, cappedKey := key("capped-co", capped.ID)
	meteredID, meteredKey := key("metered-co", metered.ID)
	if _, err := db.Exec(ctx, `UPDATE tenant_plan_changes SET effective_at = '2026-09-01T00:00:00Z'`); err != nil {
		t.Fatal(err)
	}

	clock := mustTime(t, "2026-10-10T09:00:00Z").UnixMicro()
	holder := snapshot.NewHolder(snapshot.NewPostgresSource(db), slog.New(slog.DiscardHandler))
	if err := holder.Reload(ctx); err != nil {
		t.Fatal(err)
	}
	agg := metering.NewAggregator(metering.AggregatorConfig{Producer: usage.StoreProducer{Store: s.writer}})
	checker := enforce.NewChecker(holder, limiter.NewMemoryStore(func() int64 { return clock }),
		enforce.CheckerConfig{Recorder: agg})
	check := func(secret string) enforce.Decision {
		t.Helper()
		clock += 1_000_000
		d, err := checker.Check(ctx, enforce.Request{Key: secret, Resource: "GET /x", Cost: 1})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}

	for i := 1; i <= 8; i++ {
		d := check(cappedKey)
		if want := i <= 5; d.Allowed != want {
			t.Errorf("capped check %d: allowed %v, want %v", i, d.Allowed, want)
		}
		if i > 5 && (d.Reason != tollgate.ReasonRateLimited || d.Policy != plans.QuotaRuleName || d.RetryAfterMS <= 0) {
			t.Errorf("capped check %d: reason %s policy %s retry %d; want rate_limited by %s until November",
				i, d.Reason, d.Policy, d.RetryAfterMS, plans.QuotaRuleName)
		}
		d = check(meteredKey)
		if !d.Allowed {
			t.Errorf("metered check %d denied", i)
		}
		quota := d.Rules[len(d.Rules)-1]
		if quota.Name != plans.QuotaRuleName || quota.Mode != plans.ModeShadow || quota.WouldDeny != (i > 5) {
			t.Errorf("metered check %d: quota rule %+v, want shadow, would_deny past 5", i, quota)
		}
	}
	// November: a fresh quota.
	clock = mustTime(t, "2026-11-01T00:00:00Z").UnixMicro()
	if d := check(cappedKey); !d.Allowed {
		t.Errorf("capped tenant denied in November: %+v", d)
	}

	if err := agg.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	oct := october(t)
	cst, err := s.Statement(ctx, cappedID, oct)
	if err != nil {
		t.Fatal(err)
	}
	// Hard cap: 5 allowed units, all included; base fee only.
	if cst.Usage.AllowedUnits != 5 || cst.Usage.Denied != 3 || cst.TotalMinor != 1000 {
		t.Errorf("capped: units %d denied %d total %d; want 5, 3, 1000", cst.Usage.AllowedUnits, cst.Usage.Denied, cst.TotalMinor)
	}
	mst, err := s.Statement(ctx, meteredID, oct)
	if err != nil {
		t.Fatal(err)
	}
	// Overage: 8 allowed units, 5 included, 3 × 7 = 21 billed.
	if mst.Usage.AllowedUnits != 8 || mst.OverageMinor != 21 || mst.TotalMinor != 1021 {
		t.Errorf("metered: units %d overage %d total %d; want 8, 21, 1021", mst.Usage.AllowedUnits, mst.OverageMinor, mst.TotalMinor)
	}
	rej, err := s.Rejections(ctx, cappedID, usage.Range{From: oct.Start(), To: oct.End()})
	if err != nil {
		t.Fatal(err)
	}
	if rej.ByRule[plans.QuotaRuleName] != 3 || rej.ByReason[tollgate.ReasonRateLimited] != 3 {
		t.Errorf("capped rejections %+v, want 3 by %s", rej, plans.QuotaRuleName)
	}
}
