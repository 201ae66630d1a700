package tollgate_test

import (
	"cmp"
	"encoding/json"
	"io"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/tollgate/tollgate"

// TestLayering keeps the import rule of docs/architecture.md: imports
// point down, from the programs (cmd/) to the HTTP servers (checkapi,
// adminapi, ui), to the features, to the limiter and the small shared
// pieces; usage goes by stage: the check server counts (metering), the
// ingest stage applies and answers queries (usage), billing bills, and
// the check server links no billing.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Deps", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports, linked := map[string][]string{}, map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Deps       []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		pkg := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		imports[pkg], linked[pkg] = p.Imports, p.Deps
	}
	if len(imports) < 10 {
		t.Fatalf("go list found %d packages; is the test run from the module?", len(imports))
	}

	servers := []string{"internal/checkapi", "internal/adminapi", "internal/ui"}
	features := []string{"internal/enforce", "internal/snapshot", "internal/tenants", "internal/plans", "internal/metering", "internal/usage", "internal/billing", "internal/auth", "internal/audit", "internal/demo", "internal/quota", "internal/events", "internal/credits"}
	for pkg, deps := range imports {
		for _, dep := range deps {
			if (pkg == "" || pkg == "client") && dep != module && strings.Contains(strings.SplitN(dep, "/", 2)[0], ".") {
				t.Errorf("%s imports %s: the SDK and the root package it shares use the standard library only", cmp.Or(pkg, "the root package"), dep)
				continue
			}
			own, ok := strings.CutPrefix(dep, module+"/")
			if !ok {
				if pkg == "internal/limiter" && strings.Contains(strings.SplitN(dep, "/", 2)[0], ".") {
					t.Errorf("internal/limiter imports %s: the limiter maths uses the standard library only", dep)
				}
				continue
			}
			switch {
			case strings.HasPrefix(own, "cmd/"):
				t.Errorf("%s imports %s: nothing imports a program", pkg, own)
			case pkg == "internal/limiter":
				t.Errorf("internal/limiter imports %s: it is a leaf", own)
			case strings.HasPrefix(pkg, "examples/") && own != "client" && !strings.HasPrefix(own, "examples/"):
				t.Errorf("%s imports %s: the examples use the SDK, as a service would", pkg, own)
			case hasPrefix(pkg, features) && hasPrefix(own, servers):
				t.Errorf("%s imports %s: a feature never imports a server package", pkg, own)
			case pkg == "internal/snapshot" && own == "internal/enforce":
				t.Errorf("internal/snapshot imports internal/enforce: the check reads snapshots, never the other way")
			case (pkg == "internal/statekey" || pkg == "internal/breaker") && hasPrefix(own, features):
				t.Errorf("%s imports %s: it sits below the features", pkg, own)
			case pkg == "internal/breaker" && own != "internal/limiter" && own != "internal/backoff":
				t.Errorf("internal/breaker imports %s: it wraps a limiter.Store and needs only limiter and backoff", own)
			case hasPrefix(pkg, metering) && own == "internal/enforce", pkg == "internal/enforce" && hasPrefix(own, metering):
				t.Errorf("%s imports %s: the check path and the usage pipeline meet only in the root package's UsageEvent", pkg, own)
			}
		}
	}
	checkAdminSideApart(t, linked)
	checkUsageStages(t, imports, linked)
}

// metering is the check server's side of usage; billing the admin side's
// money.
var metering, billing = []string{"internal/metering"}, []string{"internal/billing"}

// checkAdminSideApart fails when the check server links the admin side,
// or package metering links Postgres code: the check server counts
// decisions and hands them on, and only usage, the ingest stage (which
// the api links in single-process mode), writes them to Postgres. Nor
// does it link the exchange between regions (NATS), which the admin
// worker runs. linked holds each package's transitive dependencies.
func checkAdminSideApart(t *testing.T, linked map[string][]string) {
	t.Helper()
	for _, pkg := range []string{"cmd/api", "internal/checkapi", "internal/checkapi/envoyrls", "internal/enforce", "internal/metering", "internal/usage"} {
		if _, ok := linked[pkg]; !ok {
			t.Errorf("go list found no %s: update TestLayering", pkg)
		}
		for _, dep := range linked[pkg] {
			if own, ok := strings.CutPrefix(dep, module+"/"); ok && (hasPrefix(own, billing) || hasPrefix(own, []string{"internal/adminapi", "internal/ui"})) {
				t.Errorf("%s links %s: the check server never links the admin side", pkg, own)
			}
			if strings.HasPrefix(dep, "github.com/nats-io/") || dep == module+"/internal/region/exchange" {
				t.Errorf("%s links %s: the exchange between regions is the admin worker's; a check never waits on another region", pkg, dep)
			}
		}
	}
	for _, dep := range linked["internal/metering"] {
		if dep == module+"/internal/postgres" || strings.HasPrefix(dep, "github.com/jackc/") {
			t.Errorf("internal/metering links %s: Postgres code is usage's, the ingest stage", dep)
		}
	}
}

// checkUsageStages fails when the stages of usage mix: usage, the ingest
// stage (stream consumer, worker, apply, queries), links no billing and
// no feature — quota and the others plug into the apply through
// usage.Hook, which the programs wire — and billing, which only bills,
// holds no stream consumer or worker: it imports neither go-redis (the
// stream) nor backoff (the worker's retries) nor prometheus (its
// metrics). imports holds each package's direct imports, linked its
// transitive ones.
func checkUsageStages(t *testing.T, imports, linked map[string][]string) {
	t.Helper()
	const usage = "internal/usage"
	named := []string{"internal/quota", "internal/plans", "internal/credits", "internal/events", "internal/tenants", "internal/billing"}
	for _, pkg := range []string{usage, "internal/billing"} {
		if _, ok := linked[pkg]; !ok {
			t.Errorf("go list found no %s: update TestLayering", pkg)
		}
	}
	for _, dep := range linked[usage] {
		if own, ok := strings.CutPrefix(dep, module+"/"); ok && hasPrefix(own, named) {
			t.Errorf("%s links %s: the ingest stage names no feature (features plug in through usage.Hook) and imports no billing", usage, own)
		}
	}
	for _, dep := range imports["internal/billing"] {
		switch {
		case strings.HasPrefix(dep, "github.com/redis/"), dep == module+"/internal/backoff", strings.HasPrefix(dep, "github.com/prometheus/"):
			t.Errorf("internal/billing imports %s: the stream consumer and the worker are usage's; billing only bills", dep)
		}
	}
}

func hasPrefix(pkg string, prefixes []string) bool {
	for _, p := range prefixes {
		if pkg == p || strings.HasPrefix(pkg, p+"/") {
			return true
		}
	}
	return false
}
