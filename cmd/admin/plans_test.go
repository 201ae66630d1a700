package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
)

// cliDB is a fresh database for CLI tests, with the audit log helpers
// of TestEveryChangeIsAudited.
func cliDB(t *testing.T) (dbURL string, srv *adminServer) {
	t.Helper()
	dbURL = testenv.DatabaseURL(t)
	return dbURL, &adminServer{DBURL: dbURL, DB: openPool(t, dbURL)}
}

// mustRun runs the CLI and returns its stdout, failing the test on an
// error.
func mustRun(t *testing.T, dbURL string, args ...string) string {
	t.Helper()
	out, err := runAdmin(t, dbURL, "", args...)
	if err != nil {
		t.Fatalf("admin %s: %v", strings.Join(args, " "), err)
	}
	return out
}

// planJSON runs the CLI and decodes the plan it prints.
func planJSON(t *testing.T, dbURL string, args ...string) plans.Plan {
	t.Helper()
	out := mustRun(t, dbURL, args...)
	var p plans.Plan
	if err := json.Unmarshal([]byte(out), &p); err != nil {
		t.Fatalf("admin %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return p
}

// wantRefused fails unless the command fails with an error containing
// every one of want (the flags or fields it names).
func wantRefused(t *testing.T, dbURL string, args []string, want ...string) {
	t.Helper()
	_, err := runAdmin(t, dbURL, "", args...)
	if err == nil {
		t.Errorf("admin %s succeeded, want it refused", strings.Join(args, " "))
		return
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("admin %s: %v, want an error naming %s", strings.Join(args, " "), err, w)
		}
	}
}

func TestPlansCreateUpdateArchive(t *testing.T) {
	dbURL, _ := cliDB(t)
	dir := t.TempDir()

	team := planJSON(t, dbURL, "plans", "create", "--name", "team", "--display-name", "Team", "--base-fee-minor", "4900",
		"--included-units", "100000", "--quota-mode", "overage", "--overage-unit-minor", "2",
		"--tiers", `[{"up_to": 1000, "unit_minor": 3}, {"unit_minor": 2}]`,
		"--rules", `[{"name": "hourly", "limit": 5000, "period_us": 3600000000}]`, "--route", "GET /items/{id}", "--route", "GET /static/*")
	if team.ID == 0 || team.DisplayName != "Team" || team.Currency != "USD" || team.BaseFeeMinor != 4900 || team.IncludedUnits != 100000 ||
		team.QuotaMode != plans.QuotaOverage || len(team.Tiers) != 2 || len(team.Rules) != 1 || team.Rules[0].Burst != 5000 ||
		!slices.Equal(team.Routes, []string{"GET /items/{id}", "GET /static/*"}) {
		t.Errorf("plans create: %+v", team)
	}

	// The admin API's body, as YAML, from a file; the flags override it.
	body := filepath.Join(dir, "startup.yaml")
	testenv.Must(t, os.WriteFile(body, []byte(`name: startup
display_name: 2026-01-01
currency: EUR
rules:
  - name: per-second
    algorithm: token_bucket
    limit: 10
    period_us: 1000000
`), 0o600))
	startup := planJSON(t, dbURL, "plans", "create", "-f", body, "--base-fee-minor", "900")
	if startup.Name != "startup" || startup.DisplayName != "2026-01-01" || startup.Currency != "EUR" || startup.BaseFeeMinor != 900 || len(startup.Rules) != 1 ||
		startup.Rules[0].Algorithm != "token_bucket" {
		t.Errorf("plans create -f: %+v", startup)
	}
	// And as JSON on stdin.
	out, err := runAdmin(t, dbURL, `{"name": "from-stdin", "included_units": 5}`, "plans", "create", "-f", "-")
	if err != nil || !strings.Contains(out, `"included_units": 5`) {
		t.Errorf("plans create -f -: %q, %v", out, err)
	}

	wantRefused(t, dbURL, []string{"plans", "create", "--name", "Not A Name"}, "name")
	wantRefused(t, dbURL, []string{"plans", "create", "--name", "team"}, "name", "taken")
	wantRefused(t, dbURL, []string{"plans", "create", "--name", "x", "--rules", `[{"name": "r", "limt": 5}]`}, "--rules", `"limt"`)
	wantRefused(t, dbURL, []string{"plans", "create", "--name", "x", "--rules", `[{"name": "r", "limit": 5, "period_us": 0}]`}, "rules[0].period_us")
	wantRefused(t, dbURL, []string{"plans", "create", "--name", "x", "--quota-mode", "sometimes"}, "quota_mode")

	// Update changes what the flags give and keeps the rest.
	team = planJSON(t, dbURL, "plans", "update", "--plan", "team", "--base-fee-minor", "5900", "--display-name", "Team (2026)")
	if team.BaseFeeMinor != 5900 || team.DisplayName != "Team (2026)" || team.IncludedUnits != 100000 || len(team.Tiers) != 2 ||
		len(team.Rules) != 1 || len(team.Routes) != 2 {
		t.Errorf("plans update: %+v", team)
	}
	rulesFile := filepath.Join(dir, "rules.json")
	testenv.Must(t, os.WriteFile(rulesFile, []byte(`[{"name": "hourly", "limit": 6000, "period_us": 3600000000},
		{"name": "inflight", "algorithm": "concurrency", "limit": 4, "period_us": 30000000}]`), 0o600))
	team = planJSON(t, dbURL, "plans", "update", "--plan", "team", "--rules", "@"+rulesFile, "--tiers", "[]")
	if len(team.Rules) != 2 || team.Rules[0].Limit != 6000 || team.Rules[1].Algorithm != "concurrency" || len(team.Tiers) != 0 ||
		team.BaseFeeMinor != 5900 {
		t.Errorf("plans update --rules @file --tiers []: %+v", team)
	}
	// -f replaces the whole plan; a body without a name keeps the plan's.
	testenv.Must(t, os.WriteFile(body, []byte(`{"display_name": "Team, whole"}`), 0o600))
	team = planJSON(t, dbURL, "plans", "update", "--plan", "team", "-f", body)
	if team.Name != "team" || team.DisplayName != "Team, whole" || team.BaseFeeMinor != 0 || len(team.Rules) != 0 || len(team.Routes) != 0 {
		t.Errorf("plans update -f: %+v", team)
	}
	renamed := planJSON(t, dbURL, "plans", "update", "--plan", "from-stdin", "--name", "renamed")
	if renamed.Name != "renamed" {
		t.Errorf("plans update --name: %+v", renamed)
	}
	wantRefused(t, dbURL, []string{"plans", "update", "--plan", "team"}, "nothing to change")
	wantRefused(t, dbURL, []string{"plans", "update", "--plan", "nope", "--base-fee-minor", "1"}, "--plan")
	wantRefused(t, dbURL, []string{"plans", "update", "--plan", "team", "--base-fee-minor", "-1"}, "base_fee_minor")

	out, err = runAdmin(t, dbURL, "", "plans", "archive", "--plan", "team")
	if err != nil || !strings.Contains(out, "plan team is archived") {
		t.Errorf("plans archive: %q, %v", out, err)
	}
	if _, err := runAdmin(t, dbURL, "", "tenants", "create", "--name", "late", "--plan", "team"); err == nil {
		t.Error("tenants create on an archived plan succeeded")
	}
	team = planJSON(t, dbURL, "plans", "unarchive", "--plan", "team", "--json")
	if team.ArchivedAt != nil {
		t.Errorf("plans unarchive --json: %+v", team)
	}
	wantRefused(t, dbURL, []string{"plans", "archive", "--plan", "nope"}, "--plan")
}

func TestPlansRoutesAddRemove(t *testing.T) {
	dbURL, _ := cliDB(t)
	planJSON(t, dbURL, "plans", "create", "--name", "pro")
	routes := func(args ...string) []string {
		t.Helper()
		return planJSON(t, dbURL, append([]string{"plans", "routes", "--plan", "pro"}, args...)...).Routes
	}
	if got := routes("GET /a", "GET /b"); !slices.Equal(got, []string{"GET /a", "GET /b"}) {
		t.Errorf("plans routes (replace) = %q", got)
	}
	if got := routes("--add", "GET /c", "--add", "GET /a", "--remove", "GET /b"); !slices.Equal(got, []string{"GET /a", "GET /c"}) {
		t.Errorf("plans routes --add --remove = %q, want [GET /a GET /c]", got)
	}
	if got := routes("--add", "POST /d"); !slices.Equal(got, []string{"GET /a", "GET /c", "POST /d"}) {
		t.Errorf("plans routes --add = %q", got)
	}
	wantRefused(t, dbURL, []string{"plans", "routes", "--plan", "pro", "--remove", "GET /zzz"}, "--remove", "GET /zzz")
	wantRefused(t, dbURL, []string{"plans", "routes", "--plan", "pro", "--add", "get /x"}, "routes[3]")
	wantRefused(t, dbURL, []string{"plans", "routes", "--plan", "pro", "--add", "GET /x", "GET /y"}, "not both")
	wantRefused(t, dbURL, []string{"plans", "routes", "--plan", "pro", "--clear", "--add", "GET /x"}, "--clear")
	if got := routes("--clear"); len(got) != 0 {
		t.Errorf("plans routes --clear = %q", got)
	}
}

// A value of the wrong kind in a plans file or a flag's JSON is named by
// its field, as the admin API names it, not in the decoder's Go words.
func TestPlansValueOfTheWrongKindNamesItsField(t *testing.T) {
	dbURL, _ := cliDB(t)
	file := filepath.Join(t.TempDir(), "p.yaml")
	testenv.Must(t, os.WriteFile(file, []byte("plans:\n  - name: pro\n    rules:\n      - name: hourly\n        limit: \"x\"\n        period_us: 3600000000\n"), 0o600))
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"plans", "apply", "-f", file}, "admin: plans apply: -f: malformed: wrong kind of value:\n  plans[0].rules[0].limit: must be a JSON integer"},
		{[]string{"plans", "create", "--name", "team", "--rules", `[{"name":1}]`}, "admin: plans create: --rules: malformed: wrong kind of value:\n  rules[0].name: must be a JSON string"},
		{[]string{"plans", "create", "--name", "team", "--rules", "nope"}, "admin: plans create: --rules: malformed: wrong kind of value:\n  rules: must be a JSON array"},
		{[]string{"plans", "create", "--name", "team", "--tiers", `[{"up_to":1},{"unit_minor":true}]`}, "admin: plans create: --tiers: malformed: wrong kind of value:\n  tiers[1].unit_minor: must be a JSON integer"},
	} {
		_, err := runAdmin(t, dbURL, "", c.args...)
		if err == nil {
			t.Errorf("admin %s: no error", strings.Join(c.args, " "))
			continue
		}
		if got := "admin: " + errorText(err); got != c.want {
			t.Errorf("admin %s printed\n%s\nwant\n%s", strings.Join(c.args, " "), got, c.want)
		}
	}
}

func TestPlansExportApply(t *testing.T) {
	dbURL, srv := cliDB(t)
	if _, err := runAdmin(t, dbURL, "", "seed", "demo", "--usage=false"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "plans.yaml")
	exported, err := runAdmin(t, dbURL, "", "plans", "export")
	testenv.Must(t, err)
	testenv.Must(t, os.WriteFile(file, []byte(exported), 0o600))
	for _, w := range []string{"plans:\n  - name: anonymous\n", "    display_name: Pro\n", `resource: '*'`, "      - name: tokens\n", "hold: true"} {
		if !strings.Contains(exported, w) {
			t.Errorf("plans export does not contain %q:\n%s", w, exported)
		}
	}
	if strings.Contains(exported, "id:") || strings.Contains(exported, "created_at") {
		t.Errorf("plans export has read-only fields:\n%s", exported)
	}

	// apply runs apply and returns its output and the audit entries it wrote.
	apply := func(args ...string) (string, []auditEntry) {
		t.Helper()
		last := lastAuditID(t, srv)
		out, err := runAdmin(t, dbURL, "", append([]string{"plans", "apply", "-f", file}, args...)...)
		if err != nil {
			t.Fatalf("plans apply %v: %v", args, err)
		}
		return out, auditSince(t, srv, last)
	}
	// The export applied changes nothing.
	out, entries := apply()
	if len(entries) != 0 || !strings.Contains(out, "0 created, 0 updated, 6 unchanged") || !strings.Contains(out, "plan pro: unchanged") {
		t.Errorf("applying the export wrote %v:\n%s", entries, out)
	}

	// Edit: pro's fee and a rule's limit, a rule removed from llm, a new
	// plan, and free left out.
	edited := strings.Replace(exported, "display_name: Pro\n    currency: USD\n    base_fee_minor: 4900", "display_name: Pro\n    currency: USD\n    base_fee_minor: 5900", 1)
	if edited == exported {
		t.Fatalf("no pro fee of 4900 in the export:\n%s", exported)
	}
	var f planFile
	testenv.Must(t, decodeYAML([]byte(edited), &f, ""))
	var kept []planSpec
	for _, s := range f.Plans {
		switch s.Name {
		case "free":
			continue
		case "llm":
			s.Rules = slices.DeleteFunc(s.Rules, func(r plans.Rule) bool { return r.Name == "hourly" })
		}
		kept = append(kept, s)
	}
	team := planSpec{PlanInput: plans.PlanInput{Name: "team", IncludedUnits: 100, QuotaMode: plans.QuotaHard,
		Rules: []plans.Rule{{Name: "hourly", Limit: 100, PeriodUS: 3_600_000_000}}}}
	f.Plans = append(kept, team)
	j, err := json.Marshal(f) // JSON is YAML: plans apply reads both
	testenv.Must(t, err)
	testenv.Must(t, os.WriteFile(file, j, 0o600))

	out, entries = apply("--dry-run")
	if len(entries) != 0 {
		t.Errorf("plans apply --dry-run wrote %v", entries)
	}
	for _, w := range []string{"plan pro: update\n  ~ base_fee_minor: 4900 → 5900\n", "plan llm: update\n  - rules[hourly].name: hourly\n",
		"plan team: create\n  + name: team\n", "  + rules[hourly].limit: 100\n", "plan enterprise: unchanged\n",
		"plan free: not in the file, left as it is (--archive-missing archives it)\n",
		"dry run: 1 to create, 2 to update, 3 unchanged; nothing was changed\n"} {
		if !strings.Contains(out, w) {
			t.Errorf("plans apply --dry-run does not say %q:\n%s", w, out)
		}
	}
	if p, err := plans.NewStore(srv.DB).GetByName(context.Background(), "pro"); err != nil || p.BaseFeeMinor != 4900 {
		t.Errorf("after --dry-run pro = %+v, %v; want it unchanged", p, err)
	}

	out, entries = apply()
	var actions []string
	for _, e := range entries {
		actions = append(actions, e.Actor+" "+e.Action)
	}
	slices.Sort(actions)
	if !slices.Equal(actions, []string{"cli plan.create", "cli plan.update", "cli plan.update"}) || !strings.Contains(out, "1 created, 2 updated, 3 unchanged") {
		t.Errorf("plans apply wrote %v, want one entry per changed plan:\n%s", actions, out)
	}
	ps := plans.NewStore(srv.DB)
	pro, err := ps.GetByName(context.Background(), "pro")
	testenv.Must(t, err)
	llm, err := ps.GetByName(context.Background(), "llm")
	testenv.Must(t, err)
	if pro.BaseFeeMinor != 5900 || len(pro.Rules) != 2 || ruleNames(llm.Rules) != "tokens, inflight" {
		t.Errorf("after apply: pro %+v, llm rules %s", pro, ruleNames(llm.Rules))
	}
	// Again: nothing changes, nothing is written.
	if out, entries = apply(); len(entries) != 0 || !strings.Contains(out, "0 created, 0 updated, 6 unchanged") {
		t.Errorf("applying twice wrote %v:\n%s", entries, out)
	}
	// --archive-missing archives free, once.
	if out, entries = apply("--archive-missing"); len(entries) != 1 || entries[0].Action != "plan.archive" ||
		!strings.Contains(out, "plan free: archive\n  + archived: true\n") {
		t.Errorf("plans apply --archive-missing wrote %v:\n%s", entries, out)
	}
	if out, entries = apply("--archive-missing"); len(entries) != 0 || !strings.Contains(out, "plan free: not in the file, archived") {
		t.Errorf("plans apply --archive-missing again wrote %v:\n%s", entries, out)
	}
	// The export of the result round-trips, archived plan included.
	exported, err = runAdmin(t, dbURL, "", "plans", "export")
	testenv.Must(t, err)
	testenv.Must(t, os.WriteFile(file, []byte(exported), 0o600))
	if out, entries = apply(); len(entries) != 0 || !strings.Contains(out, "7 unchanged") || !strings.Contains(exported, "archived: true") {
		t.Errorf("applying the second export wrote %v:\n%s\nexport:\n%s", entries, out, exported)
	}

	// A bad file changes nothing and names every problem.
	testenv.Must(t, os.WriteFile(file, []byte(`plans:
  - name: pro
    base_fee_minor: 1
  - name: team
    rules: [{name: hourly, limit: 0, period_us: 1000000, burst: -1}]
  - name: pro
`), 0o600))
	last := lastAuditID(t, srv)
	wantRefused(t, dbURL, []string{"plans", "apply", "-f", file}, "plans[1].rules[0]", "plans[2].name")
	testenv.Must(t, os.WriteFile(file, []byte("plans:\n  - name: pro\n    base_fee: 1\n"), 0o600))
	wantRefused(t, dbURL, []string{"plans", "apply", "-f", file}, "-f", `"base_fee"`)
	testenv.Must(t, os.WriteFile(file, []byte("plans: []\n"), 0o600))
	wantRefused(t, dbURL, []string{"plans", "apply", "-f", file, "--archive-missing"}, "lists no plan")
	wantRefused(t, dbURL, []string{"plans", "apply"}, "-f is required")
	if got := auditSince(t, srv, last); len(got) != 0 {
		t.Errorf("refused applies wrote %v", got)
	}
}
