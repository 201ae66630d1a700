package main

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testenv"
)

// TestWorkerRegionSettings: the worker of a region refuses to start on
// an unknown region, a missing list or a NATS server it cannot reach,
// naming the setting.
func TestWorkerRegionSettings(t *testing.T) {
	url := testenv.DatabaseURL(t)
	base := map[string]string{"TOLLGATE_DATABASE_URL": url, "TOLLGATE_REDIS_ADDR": testenv.RedisAddr(t), "TOLLGATE_SECRET_KEY": testenv.SecretKey,
		"TOLLGATE_REGION": "eu", "TOLLGATE_REGIONS": "us,eu,ap", "TOLLGATE_REGION_NATS_URL": "nats://" + testenv.FreeAddr(t)}
	for _, tc := range []struct {
		name, key, value, want string
	}{
		{"unknown region", "TOLLGATE_REGION", "mars", "TOLLGATE_REGION"},
		{"missing list", "TOLLGATE_REGIONS", "", "TOLLGATE_REGIONS"},
		{"missing NATS", "TOLLGATE_REGION_NATS_URL", "", "TOLLGATE_REGION_NATS_URL"},
		{"unreachable NATS", "", "", "TOLLGATE_REGION_NATS_URL"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{}
			for k, v := range base {
				env[k] = v
			}
			if tc.key != "" {
				env[tc.key] = tc.value
			}
			err := run(context.Background(), []string{"worker"}, func(k string) string { return env[k] }, strings.NewReader(""), io.Discard, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// TestPlanRegionScope: plans rule sets a rule's region scope; without
// regions a global one is refused naming the field.
func TestPlanRegionScope(t *testing.T) {
	url := testenv.DatabaseURL(t)
	if _, err := runAdmin(t, url, "", "plans", "create", "--name", "scoped"); err != nil {
		t.Fatal(err)
	}
	_, err := runAdmin(t, url, "", "plans", "rule", "--plan", "scoped", "--name", "minute", "--algorithm", "fixed_window",
		"--limit", "1000", "--period", "1m", "--region-scope", "global_shared")
	if err == nil || !strings.Contains(err.Error(), "rules[0].region_scope") {
		t.Errorf("without regions: got %v, want rules[0].region_scope refused", err)
	}
	out, err := runAdmin(t, url, "", "plans", "rule", "--plan", "scoped", "--name", "minute", "--algorithm", "fixed_window",
		"--limit", "1000", "--period", "1m", "--region-scope", "regional")
	if err != nil || strings.Contains(out, "region_scope") {
		t.Errorf("regional: got %v\n%s", err, out)
	}
}

// TestPlanCommandsRefuseBadRegionSettings: with region settings the
// worker and the api refuse, the commands that change plans refuse them
// too, naming the setting, instead of reading the deployment as one of
// regions and storing a global scope nothing enforces.
func TestPlanCommandsRefuseBadRegionSettings(t *testing.T) {
	url := testenv.DatabaseURL(t)
	if _, err := runAdmin(t, url, "", "plans", "create", "--name", "scoped"); err != nil {
		t.Fatal(err)
	}
	globalRules := `[{"name": "minute", "algorithm": "fixed_window", "limit": 1000, "period_us": 60000000, "region_scope": "global_shared"}]`
	commands := []struct {
		name, stdin string
		args        []string
	}{
		{"plans create", "", []string{"plans", "create", "--name", "global", "--rules", globalRules}},
		{"plans update", "", []string{"plans", "update", "--plan", "scoped", "--rules", globalRules}},
		{"plans rule", "", []string{"plans", "rule", "--plan", "scoped", "--name", "minute", "--algorithm", "fixed_window",
			"--limit", "1000", "--period", "1m", "--region-scope", "global_shared"}},
		{"plans apply", `{"plans": [{"name": "applied", "rules": ` + globalRules + `}]}`, []string{"plans", "apply", "-f", "-"}},
	}
	for _, settings := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"no list", map[string]string{"TOLLGATE_REGION": "eu"}, "TOLLGATE_REGIONS"},
		{"region not listed", map[string]string{"TOLLGATE_REGION": "eu", "TOLLGATE_REGIONS": "us,ap"}, "TOLLGATE_REGION:"},
	} {
		for _, c := range commands {
			t.Run(settings.name+"/"+c.name, func(t *testing.T) {
				env := map[string]string{"TOLLGATE_DATABASE_URL": url, "TOLLGATE_SECRET_KEY": testenv.SecretKey}
				for k, v := range settings.env {
					env[k] = v
				}
				err := run(context.Background(), c.args, func(k string) string { return env[k] }, strings.NewReader(c.stdin), io.Discard, io.Discard, nil)
				if err == nil || !strings.Contains(err.Error(), settings.want) {
					t.Errorf("got %v, want an error naming %s", err, settings.want)
				}
			})
		}
	}
	out, err := runAdmin(t, url, "", "plans", "list", "--json")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out, "global_shared") || strings.Contains(out, `"global"`) || strings.Contains(out, `"applied"`) {
		t.Errorf("a refused command changed the plans:\n%s", out)
	}
}
