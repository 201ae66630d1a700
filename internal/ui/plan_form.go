package ui

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
)

// The plan form edits a whole plan: its pricing (flat or graduated
// tiers) and its rules, each with the fields its algorithm uses. Field
// names are the API's JSON paths ("rules[1].burst"), so that the field
// errors of the API's answer land beside their fields. "Add a rule" and
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
}

// planForm holds the form's values as typed, so that a refused form
// shows them again unchanged.
type planForm struct {
	Name, DisplayName, Currency          string
	BaseFeeMinor, IncludedUnits          string
	QuotaMode, Pricing, OverageUnitMinor string
	Tiers                                []tierForm
	Rules                                []ruleForm
}

type tierForm struct {
	UpTo, UnitMinor string
}

type ruleForm struct {
	Name, Algorithm, Limit, Period, PeriodUnit, Burst   string
	LeakyMode, Calendar, Resource, Scope, Mode, Failure string
	Anchor                                              bool
	// Preview of the saved rule; nil for a new one.
	Preview chartHTML
}

// formOptions are the choices the form's selects offer.
type formOptions struct {
	Algorithms  []limiter.Algorithm
	PeriodUnits []periodUnit
	// BurstAlgorithms use a burst; the others (windows) do not.
	BurstAlgorithms string
}

type periodUnit struct {
	Name string
	US   int64
}

var periodUnits = []periodUnit{{"ms", 1000}, {"s", limiter.SecondUS}, {"min", limiter.MinuteUS}, {"h", limiter.HourUS}, {"day", limiter.DayUS}}

var options = formOptions{Algorithms: limiter.Algorithms, PeriodUnits: periodUnits,
	BurstAlgorithms: "gcra token_bucket leaky_bucket"}

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
	return f
}

func rulesForm(rules []plans.Rule) []ruleForm {
	var out []ruleForm
	for _, r := range rules {
		rf := ruleForm{Name: r.Name, Algorithm: string(r.Algorithm), Limit: strconv.FormatInt(r.Limit, 10),
			LeakyMode: r.Options.LeakyMode, Calendar: r.Options.Calendar, Anchor: r.Options.Anchor == "first_request",
			Resource: r.Resource, Scope: string(r.Scope), Mode: string(r.Mode), Failure: string(r.FailureMode)}
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

var indexed = regexp.MustCompile(`^(rules|tiers)\[(\d+)\]\.(.+)$`)

// readPlanForm reads the posted form: the values as typed (every row,
// blank ones included) and the API request they make, with problems
// found on the way (a number that is not one) named by field, and the
// map from the request's rule and tier indexes to the form's.
func readPlanForm(r *http.Request) (planForm, map[string]any, formErrors, map[string]int) {
	pf := r.PostForm
	f := planForm{Name: strings.TrimSpace(pf.Get("name")), DisplayName: strings.TrimSpace(pf.Get("display_name")),
		Currency: strings.ToUpper(strings.TrimSpace(pf.Get("currency"))), BaseFeeMinor: pf.Get("base_fee_minor"),
		IncludedUnits: pf.Get("included_units"), QuotaMode: pf.Get("quota_mode"), Pricing: pf.Get("pricing"),
		OverageUnitMinor: pf.Get("overage_unit_minor")}
	fe := formErrors{}
	body := map[string]any{"name": f.Name, "display_name": f.DisplayName, "currency": f.Currency,
		"base_fee_minor": fe.int64(r.PostForm, "base_fee_minor", 0), "included_units": fe.int64(r.PostForm, "included_units", 0),
		"quota_mode": f.QuotaMode}
	index := map[string]int{} // "rules[2]" in the request → form row
	rows := func(name string) int {
		n, _ := strconv.Atoi(pf.Get(name))
		return min(max(n, 0), 100)
	}
	tiers := []map[string]any{}
	for i := range rows("tier_count") {
		k := fmt.Sprintf("tiers[%d].", i)
		t := tierForm{UpTo: strings.TrimSpace(pf.Get(k + "up_to")), UnitMinor: strings.TrimSpace(pf.Get(k + "unit_minor"))}
		f.Tiers = append(f.Tiers, t)
		if f.Pricing != "graduated" || (t.UpTo == "" && t.UnitMinor == "") {
			continue
		}
		index[fmt.Sprintf("tiers[%d]", len(tiers))] = i
		tiers = append(tiers, map[string]any{"up_to": fe.optInt64(r.PostForm, k+"up_to"), "unit_minor": fe.int64(r.PostForm, k+"unit_minor", 0)})
	}
	body["tiers"] = tiers
	if f.Pricing == "graduated" {
		body["overage_unit_minor"] = 0
	} else {
		body["overage_unit_minor"] = fe.int64(r.PostForm, "overage_unit_minor", 0)
	}
	var rules []map[string]any
	f.Rules, rules = readRules(pf, fe, index)
	body["rules"] = rules
	return f, body, fe, index
}

// readRules reads the rule rows of a posted form (rule_count rows,
// rules[i].…): the rows to show again (removed and blank ones left out),
// the API's rules they make, problems with their values in fe (named by
// the rows shown again), and in index the row of each of the API's
// rules[k].
func readRules(pf url.Values, fe formErrors, index map[string]int) ([]ruleForm, []map[string]any) {
	var forms []ruleForm
	local := formErrors{}
	rules := []map[string]any{}
	rawToRow := map[int]int{} // the posted row → the row shown again
	n, _ := strconv.Atoi(pf.Get("rule_count"))
	for i := range min(max(n, 0), 100) {
		k := fmt.Sprintf("rules[%d].", i)
		rf := ruleForm{Name: strings.TrimSpace(pf.Get(k + "name")), Algorithm: pf.Get(k + "algorithm"),
			Limit: strings.TrimSpace(pf.Get(k + "limit")), Period: strings.TrimSpace(pf.Get(k + "period")),
			PeriodUnit: pf.Get(k + "period_unit"), Burst: strings.TrimSpace(pf.Get(k + "burst")),
			LeakyMode: pf.Get(k + "leaky_mode"), Calendar: pf.Get(k + "calendar"), Anchor: pf.Get(k+"anchor") == "first_request",
			Resource: strings.TrimSpace(pf.Get(k + "resource")), Scope: pf.Get(k + "scope"), Mode: pf.Get(k + "mode"),
			Failure: pf.Get(k + "failure_mode")}
		if pf.Get(k+"remove") == "yes" || (rf.Name == "" && rf.Limit == "") {
			continue // removed, or a blank row
		}
		forms = append(forms, rf)
		row := len(forms) - 1
		rawToRow[i] = row
		index[fmt.Sprintf("rules[%d]", len(rules))] = row
		rule := map[string]any{"name": rf.Name, "algorithm": rf.Algorithm, "limit": local.int64(pf, k+"limit", 0),
			"resource": rf.Resource, "scope": rf.Scope, "mode": rf.Mode, "failure_mode": rf.Failure}
		opts := map[string]any{}
		if rf.Algorithm == string(limiter.FixedWindow) {
			if rf.Calendar != "" {
				opts["calendar"] = rf.Calendar
			}
			if rf.Anchor {
				opts["anchor"] = "first_request"
			}
		}
		if rf.Algorithm == string(limiter.LeakyBucket) && rf.LeakyMode != "" {
			opts["leaky_mode"] = rf.LeakyMode
		}
		rule["options"] = opts
		if usesBurst(rf.Algorithm) {
			rule["burst"] = local.int64(pf, k+"burst", 0)
		}
		if rf.Period != "" || rf.Calendar == "" || rf.Algorithm != string(limiter.FixedWindow) {
			n := local.int64(pf, k+"period", 0)
			unit := int64(0)
			for _, u := range periodUnits {
				if u.Name == rf.PeriodUnit {
					unit = u.US
				}
			}
			if unit == 0 {
				local[k+"period"] = "choose a unit"
			}
			rule["period_us"] = n * unit
		}
		rules = append(rules, rule)
	}
	// Problems found here name the posted rows: name the rows shown again.
	for k, v := range local {
		if m := indexed.FindStringSubmatch(k); m != nil {
			raw, _ := strconv.Atoi(m[2])
			k = fmt.Sprintf("rules[%d].%s", rawToRow[raw], m[3])
		}
		fe[k] = v
	}
	return forms, rules
}

// showRuleErrors puts the API's field errors in err, if it has any, on
// the rows of a rules form (see formErrorsOf) as *errs, sets *msg to say
// that nothing was saved, and reports whether it did.
func showRuleErrors(err error, index map[string]int, errs *map[string]string, msg *string) bool {
	apiErrs := fieldErrors(err)
	if len(apiErrs) == 0 {
		return false
	}
	*errs = formErrorsOf(apiErrs, index)
	*msg = "Nothing was saved: " + tollgate.ErrorMessage(err) + ". Each problem is shown beside its field."
	return true
}

// formErrorsOf moves the API's field errors onto the form's rows: the
// request's rules[2] may be the form's fourth row when rows were removed
// or left blank. period_us is shown beside the period, options beside
// their fields.
func formErrorsOf(apiErrs map[string]string, index map[string]int) map[string]string {
	out := map[string]string{}
	for k, v := range apiErrs {
		if m := indexed.FindStringSubmatch(k); m != nil {
			row, ok := index[m[1]+"["+m[2]+"]"]
			if !ok {
				row, _ = strconv.Atoi(m[2])
			}
			field := strings.TrimPrefix(m[3], "options.")
			if field == "period_us" {
				field = "period"
			}
			k = fmt.Sprintf("%s[%d].%s", m[1], row, field)
		}
		out[k] = v
	}
	return out
}

// PlanNew serves GET /plans/new.
func (c *Console) PlanNew() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f := planForm{Currency: "USD", BaseFeeMinor: "0", IncludedUnits: "0", QuotaMode: "none", Pricing: "flat",
			OverageUnitMinor: "0", Rules: []ruleForm{blankRule()}, Tiers: []tierForm{{}, {}}}
		c.render(w, r, http.StatusOK, "plan_form", "plans", planFormPage{Form: f, Options: options})
	})
}

// PlanEdit serves GET /plans/{planID}/edit.
func (c *Console) PlanEdit() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := pathPlanID(r)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		p, err := c.plans.Get(r.Context(), id)
		if err != nil {
			c.Error(w, r, err)
			return
		}
		f := formOf(p)
		f.Tiers = append(f.Tiers, tierForm{})
		c.render(w, r, http.StatusOK, "plan_form", "plans", planFormPage{ID: id, Form: f, Options: options})
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
		f, body, fe, index := readPlanForm(r)
		page := planFormPage{ID: id, Form: f, Options: options, Errors: map[string]string{}}
		switch r.PostForm.Get("action") {
		case "add-rule":
			page.Form.Rules = append(page.Form.Rules, blankRule())
			c.render(w, r, http.StatusOK, "plan_form", "plans", page)
			return
		case "add-tier":
			page.Form.Tiers = append(page.Form.Tiers, tierForm{})
			c.render(w, r, http.StatusOK, "plan_form", "plans", page)
			return
		}
		if len(fe) > 0 {
			page.Errors, page.Message = fe, "Some values are not numbers: nothing was saved."
			c.render(w, r, http.StatusUnprocessableEntity, "plan_form", "plans", page)
			return
		}
		var saved plans.Plan
		var err error
		if create {
			err = c.call(w, r, http.MethodPost, "/api/v1/plans", body, &saved)
		} else {
			err = c.call(w, r, http.MethodPut, "/api/v1/plans/"+strconv.FormatInt(id, 10), body, &saved)
		}
		if err != nil {
			if showRuleErrors(err, index, &page.Errors, &page.Message) {
				c.render(w, r, statusOf(err), "plan_form", "plans", page)
				return
			}
			c.Error(w, r, err)
			return
		}
		msg := "Plan " + saved.Name + " saved: checks use its rules within a second."
		if create {
			msg = "Plan " + saved.Name + " created."
		}
		redirect(w, r, "/plans/"+strconv.FormatInt(saved.ID, 10), msg)
	})
}
