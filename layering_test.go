package tollgate_test

import (
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
// pieces.
func TestLayering(t *testing.T) {
	out, err := exec.Command("go", "list", "-json=ImportPath,Imports,Standard", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	imports := map[string][]string{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p struct {
			ImportPath string
			Imports    []string
		}
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		imports[strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")] = p.Imports
	}
	if len(imports) < 10 {
		t.Fatalf("go list found %d packages; is the test run from the module?", len(imports))
	}

	servers := []string{"internal/checkapi", "internal/adminapi", "internal/ui"}
	features := []string{"internal/enforce", "internal/snapshot", "internal/tenants", "internal/plans", "internal/usage", "internal/auth", "internal/audit"}
	for pkg, deps := range imports {
		for _, dep := range deps {
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
			case hasPrefix(pkg, features) && hasPrefix(own, servers):
				t.Errorf("%s imports %s: a feature never imports a server package", pkg, own)
			case pkg == "internal/snapshot" && own == "internal/enforce":
				t.Errorf("internal/snapshot imports internal/enforce: the check reads snapshots, never the other way")
			case (pkg == "internal/statekey" || pkg == "internal/breaker") && hasPrefix(own, features):
				t.Errorf("%s imports %s: it sits below the features", pkg, own)
			case pkg == "internal/breaker" && own != "internal/limiter" && own != "internal/backoff":
				t.Errorf("internal/breaker imports %s: it wraps a limiter.Store and needs only limiter and backoff", own)
			case pkg == "internal/usage" && own == "internal/enforce", pkg == "internal/enforce" && own == "internal/usage":
				t.Errorf("%s imports %s: the check path and the usage pipeline meet only in the root package's UsageEvent", pkg, own)
			}
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
