package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/oasdiff/yaml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// exportedMetrics returns the metric families a running check API and a
// usage worker export, by name.
func exportedMetrics(t *testing.T) map[string]*dto.MetricFamily {
	t.Helper()
	f := newFixture(t)
	shadowKey := f.keyOnPlan(t, plans.Plan{Name: "shadowy", Rules: []plans.Rule{{Name: "trial",
		Algorithm: limiter.GCRA, Limit: 1, PeriodUS: limiter.HourUS, Mode: plans.ModeShadow}}}, "shadowy-co")
	base := f.startAPI(t, nil)
	// A decision of each kind, so that every labelled series exists.
	post(t, base, f.token, checkBody(f.keys["pro"], "", "POST /v1/search"))
	post(t, base, f.token, checkBody("tg_not-a-key", "", ""))
	for range 2 { // the second would be denied by the shadow rule
		post(t, base, f.token, checkBody(shadowKey, "", ""))
	}
	resp, err := http.Get(base + "/metrics")
	testenv.Must(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	testenv.Must(t, err)
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	testenv.Must(t, err)

	// The worker's metrics, as `admin worker` and `admin serve` register
	// them.
	client, prefix := testenv.Redis(t)
	w := &usage.Worker{Consumer: usage.Consumers{Journal: usage.NewJournalConsumer(client, prefix, 0),
		Stream: usage.NewRedisConsumer(client, usage.RedisConsumerConfig{Stream: prefix + "usage"})}}
	reg := prometheus.NewRegistry()
	w.Register(reg)
	// The webhooks' metrics, as `admin serve` registers them.
	reg.MustRegister(events.NewMetrics(f.db).Collectors()...)
	gathered, err := reg.Gather()
	testenv.Must(t, err)
	for _, mf := range gathered {
		families[mf.GetName()] = mf
	}
	return families
}

// TestMetricNames: Tollgate's metrics follow Prometheus's conventions
// (promlint: counters end in _total, base units such as _seconds and
// _bytes, no unit in a gauge's name that is not its unit, …).
func TestMetricNames(t *testing.T) {
	families := exportedMetrics(t)
	var ours []*dto.MetricFamily
	for name, mf := range families {
		if strings.HasPrefix(name, "tollgate_") {
			ours = append(ours, mf)
		}
	}
	if len(ours) < 15 {
		t.Fatalf("only %d tollgate_ metrics exported", len(ours))
	}
	problems, err := promlint.NewWithMetricFamilies(ours).Lint()
	testenv.Must(t, err)
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// metricRef finds metric names in PromQL: Tollgate's, the Go runtime's
// and the process collector's.
var metricRef = regexp.MustCompile(`\b(?:tollgate|go|process)_[a-z0-9_]+\b`)

// TestOperationsKit: every metric the Grafana dashboard and the Prometheus
// alert rules in deploy/ name is one Tollgate exports, and the alerts
// cover what an operator must hear about.
func TestOperationsKit(t *testing.T) {
	families := exportedMetrics(t)
	exists := func(name string) bool {
		if _, ok := families[name]; ok {
			return true
		}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(name, suffix); ok {
				if mf, ok := families[base]; ok && (mf.GetType() == dto.MetricType_HISTOGRAM || mf.GetType() == dto.MetricType_SUMMARY) {
					return true
				}
			}
		}
		return false
	}

	// The dashboard: every "expr" of every panel.
	raw, err := os.ReadFile("../../deploy/grafana/tollgate-dashboard.json")
	testenv.Must(t, err)
	var dashboard any
	testenv.Must(t, json.Unmarshal(raw, &dashboard))
	dashExprs := exprs(dashboard)
	if len(dashExprs) < 10 {
		t.Fatalf("the dashboard has %d queries", len(dashExprs))
	}

	// The alert rules: every "expr", and the queries in annotations.
	raw, err = os.ReadFile("../../deploy/prometheus/tollgate-alerts.yml")
	testenv.Must(t, err)
	js, err := yaml.YAMLToJSON(raw)
	testenv.Must(t, err)
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	}
	testenv.Must(t, json.Unmarshal(js, &rules))
	alerts := map[string]string{}
	var alertTexts []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Annotations["summary"] == "" {
				t.Errorf("rule %+v lacks a name, an expression or a summary", r)
			}
			alerts[r.Alert] = r.Expr
			alertTexts = append(alertTexts, r.Expr, r.Annotations["description"])
		}
	}

	for source, texts := range map[string][]string{"dashboard": dashExprs, "alert rules": alertTexts} {
		named := 0
		for _, text := range texts {
			for _, name := range metricRef.FindAllString(text, -1) {
				named++
				if !exists(name) {
					t.Errorf("the %s name %s, which Tollgate does not export (in %q)", source, name, text)
				}
			}
		}
		if named == 0 {
			t.Errorf("the %s name no metric", source)
		}
	}

	// What must page someone: Redis errors, degraded decisions, a stale
	// snapshot and a usage pipeline that falls behind.
	for _, metric := range []string{"tollgate_store_errors_total", "tollgate_checks_degraded_total",
		"tollgate_snapshot_age_seconds", "tollgate_usage_backlog_age_seconds"} {
		found := slices.ContainsFunc(slices.Collect(mapValues(alerts)), func(expr string) bool {
			return strings.Contains(expr, metric)
		})
		if !found {
			t.Errorf("no alert rule watches %s", metric)
		}
	}
}

// exprs returns the values of every "expr" key in a decoded JSON value.
func exprs(v any) []string {
	var out []string
	switch x := v.(type) {
	case map[string]any:
		for k, val := range x {
			if s, ok := val.(string); ok && k == "expr" {
				out = append(out, s)
				continue
			}
			out = append(out, exprs(val)...)
		}
	case []any:
		for _, val := range x {
			out = append(out, exprs(val)...)
		}
	}
	return out
}

func mapValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}
