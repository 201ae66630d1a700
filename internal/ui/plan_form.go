package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/region"
)

// The plan form edits a whole plan: its pricing (flat or graduated
// tiers) and its rules, each with the fields its algorithm uses. Field
// names are the plan's JSON paths ("rules[1].burst"), so that the field
// errors of plans.Ops land beside their fields. "Add a rule" and
// "Add a tier" post the form back to itself to grow it, without saving:
// no script is needed.

// planFormPage is the data of the plan form.
type planFormPage struct {
	// ID is 0 for a new plan.
	ID      int64
	Form    planForm
	Errors  map[string]string
	Message string
	Options formOptions
	// Quota is the form of the plan's quota settings, saved on its own
	// (quota.Ops.SetPlan); nil for a new plan, which has none yet.
	Quota *planQuotaForm
}

// planQuotaForm is the form of a plan's quota settings as typed: its
// tenants' default thresholds, and the default and the most a tenant's
// spend cap may be (minor units; empty: none).
type planQuotaForm struct {
	Thresholds                   []thresholdRow
	SpendCapDefault, SpendCapMax string
	Kinds                        []thresholdKind
	Currency                     string
	// Binds: the plan bills overage, where a cap holds.
	Binds   bool
	Errors  map[string]string
	Message string
}

// quotaFormOf returns the quota form of plan p's stored settings ps.
func quotaFormOf(p plans.Plan, ps quota.PlanSettings) *planQuotaForm {
	f := &planQuotaForm{Thresholds: thresholdRows(ps.Thresholds), Kinds: thresholdKinds, Currency: p.Currency,
		Binds: p.QuotaMode == plans.QuotaOverage, Errors: map[string]string{}}
	if ps.SpendCapDefaultMinor != nil {
		f.SpendCapDefault = strconv.FormatInt(*ps.SpendCapDefaultMinor, 10)
	}
	if ps.SpendCapMaxMinor != nil {
		f.SpendCapMax = strconv.FormatInt(*ps.SpendCapMaxMinor, 10)
	}
	return f
}

// planForm holds the form's values as typed, so that a refused form
// shows them again unchanged.
type planForm struct {
	Name, DisplayName, Currency          string
	BaseFeeMinor, IncludedUnits          string
	QuotaMode, Pricing, OverageUnitMinor string
	Tiers                                []tierForm
	Rules                                []ruleForm
	// Routes are the plan's route templates, one a line.
	Routes string
}

type tierForm struct {
	UpTo, UnitMinor string
}

type ruleForm struct {
	Name, Algorithm, Limit, Period, PeriodUnit, Burst   string
	LeakyMode, Calendar, Resource, Scope, Mode, Failure string
	Anchor                                              bool
	// Hold, HoldTTL and HoldExpiry are the rule's hold options.
	Hold                bool
	HoldTTL, HoldExpiry string
	// RefundOn are the outcomes of option refund_on checked ("5xx",
	// "timeout").
	RefundOn []string
	// RegionScope is the rule's scope across regions ("" regional);
	// MinShare a split's floor as typed.
	RegionScope, MinShare string
	// Preview of the saved rule; nil for a new one.
	Preview chartHTML
}

// formOptions are the choices the form's selects offer.
type formOptions struct {
	Algorithms  []limiter.Algorithm
	PeriodUnits []periodUnit
	// BurstAlgorithms use a burst; the others (windows, concurrency) do
	// not.
	BurstAlgorithms string
	// RefundOutcomes are the choices of option refund_on.
	RefundOutcomes []string
	// RegionScopes are the choices of a rule's region scope.
	RegionScopes []region.Scope
}

type periodUnit struct {
	Name string
	US   int64
}

var periodUnits = []periodUnit{{"ms", 1000}, {"s", limiter.SecondUS}, {"min", limiter.MinuteUS}, {"h", limiter.HourUS}, {"day", limiter.DayUS}}

var options = formOptions{Algorithms: limiter.Algorithms, PeriodUnits: periodUnits,
	BurstAlgorithms: "gcra token_bucket leaky_bucket", RefundOutcomes: plans.RefundOutcomes, RegionScopes: region.Scopes}

// usesBurst reports whether a burst means something for the algorithm:
// the bucket's capacity, or GCRA's tolerance. Windows count to their limit.
func usesBurst(a string) bool {
	return a == string(limiter.GCRA) || a == string(limiter.TokenBucket) || a == string(limiter.LeakyBucket)
}

// splitPeriod writes µs as a number of the largest whole unit.
func splitPeriod(us int64) (string, string) {
	for i := len(periodUnits) - 1; i >= 0; i-- {
		u := periodUnits[i]
		if us >= u.US && us%u.US == 0 {
			return strconv.FormatInt(us/u.US, 10), u.Name
		}
	}
	return strconv.FormatInt(us, 10), "µs"
}

// formOf returns the form of a stored plan.
func formOf(p plans.Plan) planForm {
	f := planForm{Name: p.Name, DisplayName: p.DisplayName, Currency: p.Currency,
		BaseFeeMinor: strconv.FormatInt(p.BaseFeeMinor, 10), IncludedUnits: strconv.FormatInt(p.IncludedUnits, 10),
		QuotaMode: string(p.QuotaMode), Pricing: "flat", OverageUnitMinor: strconv.FormatInt(p.OverageUnitMinor, 10)}
	if len(p.Tiers) > 0 {
		f.Pricing = "graduated"
	}
	for _, t := range p.Tiers {
		tf := tierForm{UnitMinor: strconv.FormatInt(t.UnitMinor, 10)}
		if t.UpTo != nil {
			tf.UpTo = strconv.FormatInt(*t.UpTo, 10)
		}
		f.Tiers = append(f.Tiers, tf)
	}
	f.Rules = rulesForm(p.Rules)
	f.Routes = strings.Join(p.Routes, "\n")
	return f
}

// readRoutes reads the routes textarea: one template a line, blank lines
// left out, so that routes[k] of a field error is the k-th template.
func readRoutes(text string) []string {
	routes := []string{}
	for line := range strings.Lines(text) {
		if line = strings.TrimSpace(line); line != "" {
			routes = append(routes, line)
		}
	}
	return routes
}

func rulesForm(rules []plans.Rule) []ruleForm {
	var out []ruleForm
	for _, r := range rules {
		rf := ruleForm{Name: r.Name, Algorithm: string(r.Algorithm), Limit: strconv.FormatInt(r.Limit, 10),
			LeakyMode: r.Options.LeakyMode, Calendar: r.Options.Calendar, Anchor: r.Options.Anchor == "first_request",
			Resource: r.Resource, Scope: string(r.Scope), Mode: string(r.Mode), Failure: string(r.FailureMode),
			Hold: r.Options.Hold, HoldExpiry: r.Options.HoldExpiry, RefundOn: r.Options.RefundOn,
			RegionScope: string(r.RegionScope)}
		if r.MinShare > 0 {
			rf.MinShare = strconv.FormatInt(r.MinShare, 10)
		}
		if r.Options.HoldTTLS > 0 {
			rf.HoldTTL = strconv.FormatInt(r.Options.HoldTTLS, 10)
		}
		rf.Period, rf.PeriodUnit = splitPeriod(r.PeriodUS)
		if rf.Calendar != "" {
			rf.Period = ""
		}
		if usesBurst(rf.Algorithm) {
			rf.Burst = strconv.FormatInt(r.Burst, 10)
		}
		rf.Preview = viewRule(r).Chart
		out = append(out, rf)
	}
	return out
}

// blankRule is a new rule's starting values.
func blankRule() ruleForm {
	return ruleForm{Algorithm: string(limiter.GCRA), PeriodUnit: "h", Resource: "*", Scope: "key", Mode: "enforce", Failure: "open"}
}

// readPlanForm reads the posted form: the values as typed (every row,
// blank ones included), the plan they make, problems found on the way (a
// number that is not one) named by field, and the form row of each of
// the plan's tiers (blank tier rows are shown again but are no tier).
func readPlanForm(r *http.Request) (planForm, plans.PlanInput, formErrors, []int) {
	pf := r.PostForm
	f := planForm{Name: strings.TrimSpace(pf.Get("name")), DisplayName: strings.TrimSpace(pf.Get("display_name")),
		Currency: strings.ToUpper(strings.TrimSpace(pf.Get("currency"))), BaseFeeMinor: pf.Get("base_fee_minor"),
		IncludedUnits: pf.Get("included_units"), QuotaMode: pf.Get("quota_mode"), Pricing: pf.Get("pricing"),
		OverageUnitMinor: pf.Get("overage_unit_minor"), Routes: pf.Get("routes")}
	fe := formErrors{}
	in := plans.PlanInput{Name: f.Name, DisplayName: f.DisplayName, Currency: f.Currency,
		BaseFeeMinor: fe.int64(pf, "base_fee_minor", 0), IncludedUnits: fe.int64(pf, "included_units", 0),
		QuotaMode: plans.QuotaMode(f.QuotaMode), Tiers: []plans.PriceTier{}, Routes: readRoutes(f.Routes)}
	var tierRows []int
	for i := range rowCount(pf, "tier_count") {
		k := fmt.Sprintf("tiers[%d].", i)
		t := tierForm{UpTo: strings.TrimSpace(pf.Get(k + "up_to")), UnitMinor: strings.TrimSpace(pf.Get(k + "unit_minor"))}
		f.Tiers = append(f.Tiers, t)
		if f.Pricing != "graduated" || (t.UpTo == "" && t.UnitMinor == "") {
			continue
		}
		tierRows = append(tierRows, i)
		in.Tiers = append(in.Tiers, plans.PriceTier{UpTo: fe.optInt64(pf, k+"up_to"), UnitMinor: fe.int64(pf, k+"unit_minor", 0)})
	}
	if f.Pricing != "graduated" {
		in.OverageUnitMinor = fe.int64(pf, "overage_unit_minor", 0)
	}
	f.Rules, in.Rules = readRules(pf, fe)
	return f, in, fe, tierRows
}

// rowCount is the number of rows a form says it has in field name: 0 to
// 100.
func rowCount(pf url.Values, name string) int {
	n, _ := strconv.Atoi(pf.Get(name))
	return min(max(n, 0), 100)
}

// readRules reads the rule rows of a posted form (rule_count rows,
// rules[i].…): the rows to show again (removed and blank ones left out)
// and the rules they make, one per row shown, in the same order — so that
// rules[k] of a field error is row k. Problems with their values go in
// fe, named by the rows shown again.
func readRules(pf url.Values, fe formErrors) ([]ruleForm, []plans.Rule) {
	var forms []ruleForm
	rules := []plans.Rule{}
	for i := range rowCount(pf, "rule_count") {
		k := fmt.Sprintf("rules[%d].", i)
		rf := ruleForm{Name: strings.TrimSpace(pf.Get(k + "name")), Algorithm: pf.Get(k + "algorithm"),
			Limit: strings.TrimSpace(pf.Get(k + "limit")), Period: strings.TrimSpace(pf.Get(k + "period")),
			PeriodUnit: pf.Get(k + "period_unit"), Burst: strings.TrimSpace(pf.Get(k + "burst")),
			LeakyMode: pf.Get(k + "leaky_mode"), Calendar: pf.Get(k + "calendar"), Anchor: pf.Get(k+"anchor") == "first_request",
			Resource: strings.TrimSpace(pf.Get(k + "resource")), Scope: pf.Get(k + "scope"), Mode: pf.Get(k + "mode"),
			Failure: pf.Get(k + "failure_mode"), Hold: pf.Get(k+"hold") == "yes",
			HoldTTL: strings.TrimSpace(pf.Get(k + "hold_ttl_s")), HoldExpiry: pf.Get(k + "hold_expiry"),
			RefundOn: pf[k+"refund_on"], RegionScope: pf.Get(k + "region_scope"), MinShare: strings.TrimSpace(pf.Get(k + "min_share"))}
		if pf.Get(k+"remove") == "yes" || (rf.Name == "" && rf.Limit == "") {
			continue // removed, or a blank row
		}
		row := fmt.Sprintf("rules[%d].", len(forms))
		forms = append(forms, rf)
		rule := plans.Rule{Name: rf.Name, Algorithm: limiter.Algorithm(rf.Algorithm), Limit: fe.number(rf.Limit, row+"limit", 0),
			Resource: rf.Resource, Scope: plans.Scope(rf.Scope), Mode: plans.Mode(rf.Mode), FailureMode: plans.FailureMode(rf.Failure)}
		if rf.Algorithm == string(limiter.FixedWindow) {
			rule.Options.Calendar = rf.Calendar
			if rf.Anchor {
				rule.Options.Anchor = "first_request"
			}
		}
		if rf.Algorithm == string(limiter.LeakyBucket) {
			rule.Options.LeakyMode = rf.LeakyMode
		}
		rule.Options.Hold, rule.Options.HoldExpiry, rule.Options.RefundOn = rf.Hold, rf.HoldExpiry, rf.RefundOn
		if rf.HoldTTL != "" {
			rule.Options.HoldTTLS = fe.number(rf.HoldTTL, row+"hold_ttl_s", 0)
		}
		rule.RegionScope = region.Scope(rf.RegionScope)
		if rf.MinShare != "" && rf.RegionScope == string(region.GlobalSplit) {
			rule.MinShare = fe.number(rf.MinShare, row+"min_share", 0)
		}
		if usesBurst(rf.Algorithm) {
			rule.Burst = fe.number(rf.Burst, row+"burst", 0)
		}
		if rf.Period != "" || rf.Calendar == "" || rf.Algorithm != string(limiter.FixedWindow) {
			n := fe.number(rf.Period, row+"period", 0)
			unit := int64(0)
			for _, u := range periodUnits {
				if u.Name == rf.PeriodUnit {
					unit = u.US
				}
			}
			if unit == 0 {
				fe[row+"period"] = "choose a unit"
			}
			rule.PeriodUS = n * unit
		}
		rules = append(rules, rule)
	}
	return forms, rules
}

// saveRules makes the change of a rules form: a plan's, or a tenant's
// overrides. Values that are not numbers (fe) save nothing, and neither
// does a change refused with field errors, which are put on the form's
// rows (see formFields); either way reshow shows the form again with the
// status, the errors and a message that says so. Any other error is the
// error page. ok is false when the change was not made (the answer is
// written).
func saveRules[T any](c *Console, w http.ResponseWriter, r *http.Request, fe formErrors, tierRows []int,
	reshow func(status int, errs map[string]string, msg string), change func() (T, error)) (v T, ok bool) {
	if len(fe) > 0 {
		reshow(http.StatusUnprocessableEntity, fe, "Some values are not numbers: nothing was saved.")
		return v, false
	}
	v, err := change()
	if err == nil {
		return v, true
	}
	if fields := fieldErrors(err); len(fields) > 0 {
		reshow(statusOf(err), formFields(fields, tierRows),
			"Nothing was saved: "+tollgate.ErrorMessage(err)+". Each problem is shown beside its field.")
		return v, false
	}
	c.Error(w, r, err)
	return v, false
}

// formFields names a plan's field errors ("rules[1].period_us",
// "tiers[0].up_to") by the form's fields: a rule's period_us is shown
// beside its period and its options beside their own fields; tiers[k] is
// the form's tier row tierRows[k], as blank rows are no tiers.
func formFields(fields map[string]string, tierRows []int) map[string]string {
	out := make(map[string]string, len(fields))
	for k, v := range fields {
		if rest, ok := strings.CutPrefix(k, "tiers["); ok {
			if n, field, ok := strings.Cut(rest, "]."); ok {
				if i, err := strconv.Atoi(n); err == nil && i >= 0 && i < len(tierRows) {
					k = fmt.Sprintf("tiers[%d].%s", tierRows[i], field)
				}
			}
		}
		if strings.HasPrefix(k, "rules[") {
			k = strings.Replace(strings.Replace(k, ".options.", ".", 1), ".period_us", ".period", 1)
		}
		out[k] = v
	}
	if routes := routeErrors(fields); routes != "" {
		out["routes"] = routes
	}
	return out
}

// routeErrors returns the problems with routes ("routes" and
// "routes[k]", the k-th template of the textarea) as one text, in the
// routes' order, or "".
func routeErrors(fields map[string]string) string {
	var lines []string
	if v := fields["routes"]; v != "" {
		lines = append(lines, v)
	}
	for k := range plans.MaxRoutes + 1 {
		if v := fields[fmt.Sprintf("routes[%d]", k)]; v != "" {
			lines = append(lines, fmt.Sprintf("route %d: %s", k+1, v))
		}
	}
	return strings.Join(lines, "; ")
}

// PlanNew serves GET /plans/new.
func (c *Console) PlanNew() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := planForm{Currency: "USD", BaseFeeMinor: "0", IncludedUnits: "0", QuotaMode: "none", Pricing: "flat",
			OverageUnitMinor: "0", Rules: []ruleForm{blankRule()}, Tiers: []tierForm{{}, {}}}
		c.render(w, r, http.StatusOK, "plan_form", "plans", planFormPage{Form: f, Options: options})
	})
}

// PlanEdit serves GET /plans/{planID}/edit: the plan's form, and the
// form of its quota settings.
func (c *Console) PlanEdit() http.Handler {
	return loadedHandler(c, pathPlanID, func(w http.ResponseWriter, r *http.Request, id int64) {
		c.planEdit(w, r, id, http.StatusOK, nil)
	})
}

// planEdit renders the edit page of plan id with status: the stored plan,
// and its quota form as typed (reshown, with its errors) or else as
// stored.
func (c *Console) planEdit(w http.ResponseWriter, r *http.Request, id int64, status int, reshown *planQuotaForm) {
	p, err := c.plans.Get(r.Context(), id)
	if err != nil {
		c.Error(w, r, err)
		return
	}
	q := reshown
	if q == nil {
		if q, err = c.storedQuotaForm(r, p); err != nil {
			c.Error(w, r, err)
			return
		}
	}
	f := formOf(p)
	f.Tiers = append(f.Tiers, tierForm{})
	c.render(w, r, status, "plan_form", "plans", planFormPage{ID: id, Form: f, Options: options, Quota: q})
}

// storedQuotaForm returns the quota form of plan p's stored settings.
func (c *Console) storedQuotaForm(r *http.Request, p plans.Plan) (*planQuotaForm, error) {
	ps, err := c.quota.PlanSettings(r.Context(), p.ID)
	if err != nil {
		return nil, err
	}
	return quotaFormOf(p, ps), nil
}

// PlanQuotaSave serves POST /plans/{planID}/quota: the plan's default
// thresholds and spend caps, through quota.Ops.SetPlan (plan.quota), the
// operation of the API's PUT /api/v1/plans/{planID}/quota and of `admin
// plans quota`. Empty threshold rows are left out; an empty cap is none.
// Refused values are shown beside their rows, and nothing is saved.
func (c *Console) PlanQuotaSave() http.Handler {
	return loadedHandler(c, c.planOf, func(w http.ResponseWriter, r *http.Request, p plans.Plan) {
		id := p.ID
		pf := r.PostForm
		fe := formErrors{}
		rows, list := readThresholds(pf, fe)
		in := quota.PlanSettingsInput{Thresholds: list, SpendCapDefaultMinor: fe.optInt64(pf, "spend_cap_default_minor"),
			SpendCapMaxMinor: fe.optInt64(pf, "spend_cap_max_minor")}
		reshow := func(status int, errs map[string]string) {
			q := quotaFormOf(p, quota.PlanSettings{})
			q.Thresholds = append(rows, q.Thresholds...) // the rows as typed, then the blank ones
			q.SpendCapDefault = strings.TrimSpace(pf.Get("spend_cap_default_minor"))
			q.SpendCapMax = strings.TrimSpace(pf.Get("spend_cap_max_minor"))
			q.Errors = onThresholdRows(errs)
			q.Message = "Nothing was saved: each problem is shown beside its field."
			c.planEdit(w, r, id, status, q)
		}
		if c.formFailed(w, r, fe.err(), reshow) {
			return
		}
		if _, err := c.cfg.Quota.SetPlan(r.Context(), actor(r), id, in); c.formFailed(w, r, err, reshow) {
			return
		}
		redirect(w, r, "/plans/"+strconv.FormatInt(id, 10),
			"Thresholds and spend caps of plan "+p.Name+" saved: checks use them within a second.")
	})
}

// PlanSave serves POST /plans (create) and POST /plans/{planID} (the
// API's PUT: the plan is replaced as a whole). With action=add-rule or
// add-tier the form comes back one row longer, unsaved.
func (c *Console) PlanSave(create bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var id int64
		if !create {
			var err error
			if id, err = pathPlanID(r); err != nil {
				c.Error(w, r, err)
				return
			}
		}
		f, in, fe, tierRows := readPlanForm(r)
		page := planFormPage{ID: id, Form: f, Options: options, Errors: map[string]string{}}
		// render shows the form again as typed; an edit form keeps the
		// plan's stored quota section, which it does not post.
		render := func(status int) {
			if !create {
				p, err := c.plans.Get(r.Context(), id)
				if err == nil {
					page.Quota, err = c.storedQuotaForm(r, p)
				}
				if err != nil {
					c.Error(w, r, err)
					return
				}
			}
			c.render(w, r, status, "plan_form", "plans", page)
		}
		switch r.PostForm.Get("action") {
		case "add-rule":
			page.Form.Rules = append(page.Form.Rules, blankRule())
			render(http.StatusOK)
			return
		case "add-tier":
			page.Form.Tiers = append(page.Form.Tiers, tierForm{})
			render(http.StatusOK)
			return
		}
		reshow := func(status int, errs map[string]string, msg string) {
			page.Errors, page.Message = errs, msg
			render(status)
		}
		saved, ok := saveRules(c, w, r, fe, tierRows, reshow, func() (plans.Plan, error) {
			if create {
				return c.cfg.Plans.Create(r.Context(), actor(r), in)
			}
			return c.cfg.Plans.Update(r.Context(), actor(r), id, in)
		})
		if !ok {
			return
		}
		msg := "Plan " + saved.Name + " saved: checks use its rules within a second."
		if create {
			msg = "Plan " + saved.Name + " created."
		}
		redirect(w, r, "/plans/"+strconv.FormatInt(saved.ID, 10), msg)
	})
}
