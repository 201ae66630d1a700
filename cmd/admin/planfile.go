package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/plans"
)

// Plans as code: plans export writes every plan to a YAML file, plans
// apply makes the database's plans what a file says, through the same
// audited operations as the console (plans.Ops). A plan in the file is the
// admin API's plan body, so the JSON the API takes works as it is.

// planFile is a plans file, as plans export writes it and plans apply
// reads it.
type planFile struct {
	Plans []planSpec `json:"plans"`
}

// planSpec is one plan of a plans file: the admin API's plan body, and
// whether the plan is archived.
type planSpec struct {
	plans.PlanInput
	Archived bool `json:"archived,omitempty"`
}

// specOf returns the spec of stored plan p.
func specOf(p plans.Plan) (planSpec, error) {
	s := planSpec{Archived: p.ArchivedAt != nil}
	if err := convert(p, &s.PlanInput); err != nil {
		return planSpec{}, err
	}
	return s.canonical()
}

// canonical returns s as it would be stored, its defaults filled and its
// rules' (read-only) IDs cleared: two specs that store the same plan are
// equal.
func (s planSpec) canonical() (planSpec, error) {
	var p plans.Plan
	if err := convert(s.PlanInput, &p); err != nil {
		return planSpec{}, err
	}
	out := planSpec{Archived: s.Archived}
	if err := convert(p.WithDefaults(), &out.PlanInput); err != nil {
		return planSpec{}, err
	}
	out.Tiers = orEmpty(out.Tiers)
	out.Rules = orEmpty(out.Rules)
	for i := range out.Rules {
		out.Rules[i].ID = 0
	}
	return out, nil
}

// orEmpty returns s, or an empty slice for nil: the store reads no
// tiers or rules as empty.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// node returns s as a YAML mapping in the order of the body's fields,
// block style, without the rules' IDs.
func (s planSpec) node() (*yaml.Node, error) {
	j, err := json.Marshal(s)
	if err != nil {
		return nil, err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(j, &doc); err != nil {
		return nil, err
	}
	n := doc.Content[0]
	// Without JSON's styles, the encoder writes block collections and
	// quotes only the strings that need it.
	walk(n, func(n *yaml.Node) { n.Style = 0 })
	if rules := mappingValue(n, "rules"); rules != nil {
		for _, r := range rules.Content {
			for i := 0; i < len(r.Content); i += 2 {
				if r.Content[i].Value == "id" {
					r.Content = slices.Delete(r.Content, i, i+2)
					break
				}
			}
		}
	}
	return n, nil
}

// walk calls do with n and every node under it.
func walk(n *yaml.Node, do func(*yaml.Node)) {
	do(n)
	for _, c := range n.Content {
		walk(c, do)
	}
}

// mappingValue returns the value of key in mapping n, or nil.
func mappingValue(n *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

// planLine is one leaf of a plan's YAML: its path, such as
// "rules[hourly].limit", and its value.
type planLine struct{ path, value string }

// lines flattens n to its leaves, in order, items of a sequence of
// mappings with a name under [name] (rules), others under [index].
func lines(prefix string, n *yaml.Node, out []planLine) []planLine {
	switch {
	case n.Kind == yaml.MappingNode && len(n.Content) > 0:
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = lines(strings.TrimPrefix(prefix+"."+n.Content[i].Value, "."), n.Content[i+1], out)
		}
	case n.Kind == yaml.SequenceNode && len(n.Content) > 0:
		for i, item := range n.Content {
			key := fmt.Sprint(i)
			if name := mappingValue(item, "name"); name != nil {
				key = name.Value
			}
			out = lines(fmt.Sprintf("%s[%s]", prefix, key), item, out)
		}
	case n.Kind == yaml.MappingNode:
		out = append(out, planLine{prefix, "{}"})
	case n.Kind == yaml.SequenceNode:
		out = append(out, planLine{prefix, "[]"})
	default:
		out = append(out, planLine{prefix, n.Value})
	}
	return out
}

// diff returns the lines that tell have from want: "+ path: value" for a
// leaf want adds, "- path: value" for one it removes, "~ path: old → new"
// for one it changes.
func diff(have, want []planLine) []string {
	old := make(map[string]string, len(have))
	for _, l := range have {
		old[l.path] = l.value
	}
	var out []string
	seen := map[string]bool{}
	for _, l := range want {
		seen[l.path] = true
		switch v, ok := old[l.path]; {
		case !ok:
			out = append(out, fmt.Sprintf("+ %s: %s", l.path, l.value))
		case v != l.value:
			out = append(out, fmt.Sprintf("~ %s: %s → %s", l.path, v, l.value))
		}
	}
	for _, l := range have {
		if !seen[l.path] {
			out = append(out, fmt.Sprintf("- %s: %s", l.path, l.value))
		}
	}
	return out
}

// ruleNames returns the names of rules, in order.
func ruleNames(rules []plans.Rule) string {
	names := make([]string, len(rules))
	for i, r := range rules {
		names[i] = r.Name
	}
	return strings.Join(names, ", ")
}

const plansApplyHelp = `Makes the plans of the file (as plans export writes it) what the database
holds, through the same operations as the console: a plan missing from the
database is created (plan.create), one that differs is replaced
(plan.update), and archived or brought back when its "archived" says so
(plan.archive, plan.unarchive). Each plan that changes is one audited
change; applying the same file again changes nothing and writes no audit
entry. Plans absent from the file are left as they are, unless
--archive-missing (which archives the anonymous plan too when the file
leaves it out: callers without a key then get no rules). Plans are not
deleted. The whole file is checked before anything changes; --dry-run
prints what would change, plan by plan, and changes nothing.
  admin plans export > plans.yaml
  $EDITOR plans.yaml
  admin plans apply -f plans.yaml --dry-run
  admin plans apply -f plans.yaml
A plan is the admin API's plan body (name, display_name, currency,
base_fee_minor, included_units, overage_unit_minor, quota_mode, tiers,
rules, routes) and archived; the file is YAML or JSON: {"plans": [...]}.
A plan's quota settings, credits and billing settings are not in it
(plans quota, plans credits, plans billing).`

func plansApply(fs *flag.FlagSet) action {
	file := fs.String("f", "", "the plans file, YAML or JSON; - for stdin (required)")
	dryRun := fs.Bool("dry-run", false, "print what would change, and change nothing")
	archiveMissing := fs.Bool("archive-missing", false, "archive the plans the file does not list")
	return func(ctx context.Context, e *invocation) error {
		var f planFile
		if err := decodeDocument(e, *file, &f, ""); err != nil {
			return fmt.Errorf("plans apply: -f: %w", err)
		}
		specs, err := f.check()
		if err != nil {
			return fmt.Errorf("plans apply: %s: %w", *file, err)
		}
		stored, err := plans.NewStore(e.db).List(ctx)
		if err != nil {
			return fmt.Errorf("plans apply: %w", err)
		}
		ops, err := e.planOps()
		if err != nil {
			return fmt.Errorf("plans apply: %w", err)
		}
		a := planApplier{e: e, ops: ops, dryRun: *dryRun}
		for _, want := range specs {
			i := slices.IndexFunc(stored, func(p plans.Plan) bool { return p.Name == want.Name })
			if i < 0 {
				err = a.create(ctx, want)
			} else {
				err = a.update(ctx, stored[i], want)
			}
			if err != nil {
				return fmt.Errorf("plans apply: plan %s: %w", want.Name, err)
			}
		}
		for _, p := range stored {
			if slices.ContainsFunc(specs, func(s planSpec) bool { return s.Name == p.Name }) {
				continue
			}
			have, err := specOf(p)
			if err != nil {
				return fmt.Errorf("plans apply: %w", err)
			}
			switch {
			case have.Archived:
				a.say(p.Name, "not in the file, archived", nil)
			case *archiveMissing:
				want := have
				want.Archived = true
				if err := a.update(ctx, p, want); err != nil {
					return fmt.Errorf("plans apply: plan %s: %w", p.Name, err)
				}
			default:
				a.say(p.Name, "not in the file, left as it is (--archive-missing archives it)", nil)
			}
		}
		return a.summary()
	}
}

// check returns f's plans as they would be stored, or an error naming
// every invalid field as "plans[i].field", and plans named twice.
func (f planFile) check() ([]planSpec, error) {
	if len(f.Plans) == 0 {
		return nil, tollgate.Invalid(map[string]string{"plans": "lists no plan"})
	}
	problems := map[string]string{}
	specs := make([]planSpec, len(f.Plans))
	for i, s := range f.Plans {
		prefix := fmt.Sprintf("plans[%d].", i)
		var invalid *tollgate.Error
		if err := s.Validate(); errors.As(err, &invalid) {
			for field, problem := range invalid.Fields {
				problems[prefix+field] = problem
			}
		} else if err != nil {
			return nil, err
		}
		if slices.ContainsFunc(f.Plans[:i], func(o planSpec) bool { return o.Name == s.Name }) {
			problems[prefix+"name"] = fmt.Sprintf("%q is the name of an earlier plan of the file", s.Name)
		}
		var err error
		if specs[i], err = s.canonical(); err != nil {
			return nil, err
		}
	}
	return specs, tollgate.Invalid(problems)
}

// planApplier makes, or with dryRun only prints, the changes of plans
// apply, and counts them.
type planApplier struct {
	e                           *invocation
	ops                         *plans.Ops
	dryRun                      bool
	created, updated, unchanged int
}

// create makes plan want, archived if it says so.
func (a *planApplier) create(ctx context.Context, want planSpec) error {
	n, err := want.node()
	if err != nil {
		return err
	}
	a.created++
	a.say(want.Name, "create", diff(nil, lines("", n, nil)))
	if a.dryRun {
		return nil
	}
	p, err := a.ops.Create(ctx, audit.CLI, want.PlanInput)
	if err == nil && want.Archived {
		_, err = a.ops.SetArchived(ctx, audit.CLI, p.ID, true)
	}
	return err
}

// update makes stored plan p what want says, when it says otherwise.
func (a *planApplier) update(ctx context.Context, p plans.Plan, want planSpec) error {
	have, err := specOf(p)
	if err != nil {
		return err
	}
	haveInput, err := json.Marshal(have.PlanInput)
	if err != nil {
		return err
	}
	wantInput, err := json.Marshal(want.PlanInput)
	if err != nil {
		return err
	}
	changed := !bytes.Equal(haveInput, wantInput)
	if !changed && have.Archived == want.Archived {
		a.unchanged++
		a.say(p.Name, "unchanged", nil)
		return nil
	}
	haveNode, err := have.node()
	if err != nil {
		return err
	}
	wantNode, err := want.node()
	if err != nil {
		return err
	}
	changes := diff(lines("", haveNode, nil), lines("", wantNode, nil))
	if changed && len(changes) == 0 { // the same rules in another order
		changes = []string{fmt.Sprintf("~ rules: %s → %s", ruleNames(have.Rules), ruleNames(want.Rules))}
	}
	var what []string
	if changed {
		what = append(what, "update")
	}
	if have.Archived != want.Archived {
		what = append(what, map[bool]string{true: "archive", false: "unarchive"}[want.Archived])
	}
	a.updated++
	a.say(p.Name, strings.Join(what, ", "), changes)
	if a.dryRun {
		return nil
	}
	if changed {
		if _, err := a.ops.Update(ctx, audit.CLI, p.ID, want.PlanInput); err != nil {
			return err
		}
	}
	if have.Archived != want.Archived {
		_, err = a.ops.SetArchived(ctx, audit.CLI, p.ID, want.Archived)
	}
	return err
}

// say prints what happens to plan name, and the lines of its changes.
func (a *planApplier) say(name, what string, changes []string) {
	fmt.Fprintf(a.e.stdout, "plan %s: %s\n", name, what)
	for _, c := range changes {
		fmt.Fprintf(a.e.stdout, "  %s\n", c)
	}
}

// summary prints the counts of plans apply.
func (a *planApplier) summary() error {
	if a.dryRun {
		_, err := fmt.Fprintf(a.e.stdout, "dry run: %d to create, %d to update, %d unchanged; nothing was changed\n",
			a.created, a.updated, a.unchanged)
		return err
	}
	_, err := fmt.Fprintf(a.e.stdout, "%d created, %d updated, %d unchanged\n", a.created, a.updated, a.unchanged)
	return err
}

func plansExport(fs *flag.FlagSet) action {
	return func(ctx context.Context, e *invocation) error {
		list, err := plans.NewStore(e.db).List(ctx)
		if err != nil {
			return fmt.Errorf("plans export: %w", err)
		}
		seq := &yaml.Node{Kind: yaml.SequenceNode}
		for _, p := range list {
			s, err := specOf(p)
			if err != nil {
				return fmt.Errorf("plans export: %w", err)
			}
			n, err := s.node()
			if err != nil {
				return fmt.Errorf("plans export: %w", err)
			}
			seq.Content = append(seq.Content, n)
		}
		doc := &yaml.Node{Kind: yaml.DocumentNode, HeadComment: "Tollgate plans: edit, then `admin plans apply -f FILE --dry-run` and `admin plans apply -f FILE`.\n" +
			"Each plan is the admin API's plan body; periods are in microseconds, money in minor units.",
			Content: []*yaml.Node{{Kind: yaml.MappingNode, Content: []*yaml.Node{{Kind: yaml.ScalarNode, Value: "plans"}, seq}}}}
		enc := yaml.NewEncoder(e.stdout)
		enc.SetIndent(2)
		if err := enc.Encode(doc); err != nil {
			return fmt.Errorf("plans export: %w", err)
		}
		return enc.Close()
	}
}

// convert copies from into to through their JSON: between types that
// share JSON field names, such as plans.Plan and plans.PlanInput.
func convert(from, to any) error {
	j, err := json.Marshal(from)
	if err != nil {
		return err
	}
	return json.Unmarshal(j, to)
}

// decodeDocument reads the file name ("-": stdin) as YAML or JSON into v,
// the value called root ("" for a whole document; see decodeYAML).
func decodeDocument(e *invocation, name string, v any, root string) error {
	var data []byte
	var err error
	if name == "-" {
		data, err = io.ReadAll(e.stdin)
	} else {
		data, err = os.ReadFile(name)
	}
	if err != nil {
		return err
	}
	return decodeYAML(data, v, root)
}

// decodeArgument reads the value of flag name into v: YAML or JSON, or
// with "@FILE" the file's.
func decodeArgument(e *invocation, name, value string, v any) error {
	var err error
	if file, ok := strings.CutPrefix(value, "@"); ok {
		err = decodeDocument(e, file, v, name)
	} else {
		err = decodeYAML([]byte(value), v, name)
	}
	if err != nil {
		return fmt.Errorf("--%s: %w", name, err)
	}
	return nil
}

// decodeYAML reads YAML (or JSON, which is YAML) into v through v's JSON
// field names, as the admin API reads its bodies; a field v does not have
// is an error that names it, so that a misspelt field is not ignored, and
// a value of the wrong kind a tollgate.Error naming its field, under root
// (the flag's name; "" for a document).
func decodeYAML(data []byte, v any, root string) error {
	var n yaml.Node
	if err := yaml.Unmarshal(data, &n); err != nil {
		return err
	}
	// A date stays the text it is written as (no field is a time): an
	// unquoted display_name of 2026-01-01 is that string.
	walk(&n, func(n *yaml.Node) {
		if n.ShortTag() == "!!timestamp" {
			n.Tag = "!!str"
		}
	})
	var doc any
	if n.Kind != 0 {
		if err := n.Decode(&doc); err != nil {
			return err
		}
	}
	j, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("not a document of JSON's kinds (string keys, no binary): %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		// A value of the wrong kind is named as the admin API names it
		// ("plans[0].rules[0].limit: must be a JSON integer"), not in
		// the decoder's Go words.
		if field, problem, ok := httpx.FieldProblem(err, j, reflect.TypeOf(v)); ok {
			return &tollgate.Error{Code: tollgate.EMALFORMED, Message: "wrong kind of value",
				Fields: map[string]string{fieldPath(root, field): problem}}
		}
		return errors.New(strings.TrimPrefix(err.Error(), "json: "))
	}
	return nil
}

// fieldPath is the path of field within the value called root: a flag's
// name, or "" for a whole document.
func fieldPath(root, field string) string {
	switch {
	case root == "" && field == "":
		return "document"
	case root == "" || field == "" || strings.HasPrefix(field, "["):
		return root + field
	}
	return root + "." + field
}
