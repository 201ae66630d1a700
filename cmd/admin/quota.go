package main

import (
	"context"
	"flag"
	"fmt"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/tenants"
)

const thresholdsHelp = `Thresholds are comma-separated: "80%" (of the included units), "5000"
(units this month), "remaining:1000" (included units left). Spend caps are
integer minor units of overage a month; "" sets none.`

func plansQuota(fs *flag.FlagSet) action {
	plan := planFlag(fs, "")
	thresholds := fs.String("thresholds", "", "thresholds, e.g. 80%,100%")
	capDefault := fs.String("spend-cap-default", "", "default spend cap of its tenants (minor units)")
	capMax := fs.String("spend-cap-max", "", "the most a tenant's spend cap may be (minor units)")
	return plan.run(func(ctx context.Context, e *invocation, p plans.Plan) error {
		in := quota.PlanSettingsInput{}
		f := map[string]string{}
		in.Thresholds = parseThresholds("thresholds", *thresholds, f)
		in.SpendCapDefaultMinor = parseCap("spend-cap-default", *capDefault, f)
		in.SpendCapMaxMinor = parseCap("spend-cap-max", *capMax, f)
		return saveQuota(e, "plans quota", f, func(ops *quota.Ops) (quota.PlanSettings, error) {
			return ops.SetPlan(ctx, audit.CLI, p.ID, in)
		})
	})
}

func tenantsQuota(fs *flag.FlagSet) action {
	tenant := tenantFlag(fs, "tenant name or ID (required)")
	thresholds := fs.String("thresholds", "", `thresholds, e.g. 80%,100%; "" for the plan's`)
	capMinor := fs.String("spend-cap", "", `spend cap (minor units); "" for the plan's default`)
	return tenant.run(func(ctx context.Context, e *invocation, t tenants.Tenant) error {
		f := map[string]string{}
		in := quota.TenantSettingsInput{Thresholds: parseThresholds("thresholds", *thresholds, f),
			SpendCapMinor: parseCap("spend-cap", *capMinor, f)}
		return saveQuota(e, "tenants quota", f, func(ops *quota.Ops) (quota.TenantSettings, error) {
			return ops.SetTenant(ctx, audit.CLI, t.ID, in)
		})
	})
}

// saveQuota finishes the quota command called name: when f names invalid
// flags it returns them as an invalid error; otherwise it saves the
// settings with set and prints what set returns as JSON. Errors start
// with name.
func saveQuota[S any](e *invocation, name string, f map[string]string, set func(*quota.Ops) (S, error)) error {
	if err := tollgate.Invalid(f); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	saved, err := set(quota.NewOps(e.db))
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return printJSON(e.stdout, saved)
}

// parseThresholds reads a --thresholds flag (see thresholdsHelp); nil for
// "". A bad item is named in f under field.
func parseThresholds(field, s string, f map[string]string) []quota.Threshold {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	var out []quota.Threshold
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		var t quota.Threshold
		var err error
		if pct, ok := strings.CutSuffix(item, "%"); ok {
			t.Percent, err = strconv.ParseInt(pct, 10, 64)
		} else if left, ok := strings.CutPrefix(item, "remaining:"); ok {
			t.Remaining, err = strconv.ParseInt(left, 10, 64)
		} else {
			t.Units, err = strconv.ParseInt(item, 10, 64)
		}
		if err != nil {
			f[field] = fmt.Sprintf("%q is not N%%, N or remaining:N", item)
			return nil
		}
		out = append(out, t)
	}
	return out
}

// parseCap reads a spend cap flag: nil for "".
func parseCap(field, s string, f map[string]string) *int64 {
	if s == "" {
		return nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		f[field] = "must be an integer (minor units)"
		return nil
	}
	return &v
}
