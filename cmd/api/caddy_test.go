package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/testenv"
)

// startCaddy runs caddy in front of app with the snippets shipped in
// deploy/caddy (copied unchanged), asking the check API at api with the
// service token, and returns caddy's base URL. Its routes fail closed,
// except those below failOpenPath's first segment, which fail open.
func startCaddy(t *testing.T, api, app, token string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := os.ReadFile("../../deploy/caddy/tollgate.caddy")
	testenv.Must(t, err)
	testenv.Must(t, os.WriteFile(filepath.Join(dir, "tollgate.caddy"), b, 0o600))
	app = strings.TrimPrefix(app, "http://")
	env := []string{"TOLLGATE_API=" + strings.TrimPrefix(api, "http://"), "TOLLGATE_SERVICE_TOKEN=" + token}
	addr := testenv.Caddy(t, dir, env, func(addr string) string {
		return fmt.Sprintf(`import tollgate.caddy

http://%s {
	import tollgate-errors
	route %s/* {
		import tollgate-fail-open %s
		reverse_proxy %s
	}
	route {
		import tollgate-fail-closed
		reverse_proxy %s
	}
}
`, addr, strings.TrimSuffix(failOpenPath, failClosedPath), app, app, app)
	})
	return "http://" + addr
}

// TestCaddyForwardAuth puts real Caddy (forward_auth, with the snippets in
// deploy/caddy) in front of an upstream, asking the real check server.
func TestCaddyForwardAuth(t *testing.T) { testGatewayForwardAuth(t, startCaddy) }

// TestCaddyOutage: the snippets in deploy/caddy when the check API stops.
func TestCaddyOutage(t *testing.T) { testGatewayOutage(t, startCaddy) }
