// Command protected is a small service whose every request is checked by
// Tollgate's check API before its handler runs: a caller over its plan's
// limits gets a 429 with Retry-After, an unknown or revoked API key a
// 401/403, and every answer carries the RateLimit headers.
//
//	TOLLGATE_URL=http://127.0.0.1:8080 TOLLGATE_SERVICE_TOKEN=<token> go run ./examples/protected
//	curl -i localhost:8090/hello -H 'Authorization: Bearer <API key>'
package main

import (
	"fmt"
	"io"
	"net/http"

	"github.com/tollgate/tollgate/client"
	"github.com/tollgate/tollgate/examples/internal/serve"
)

// main serves until SIGINT or SIGTERM. Settings: TOLLGATE_URL (the check
// API), TOLLGATE_SERVICE_TOKEN, and ADDR (default :8090).
func main() { serve.Main("protected", ":8090", routes) }

// routes is the service: every route behind the middleware, except the
// health probe.
func routes(tg *client.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /hello", hello)
	mux.HandleFunc("GET /healthz", healthz)
	return tg.Middleware(client.MiddlewareOptions{
		// Requests are named by the route that serves them ("GET
		// /hello"), however the path is spelled.
		Mux:  mux,
		Skip: func(r *http.Request) bool { return r.URL.Path == "/healthz" },
	})(mux)
}

// hello greets the caller with what the check decided.
func hello(w http.ResponseWriter, r *http.Request) {
	d, _ := client.DecisionFrom(r.Context())
	who := "anonymous caller"
	if d.Tier == client.TierAuthenticated {
		who = "caller on the " + d.Plan + " plan"
	}
	if d.Degraded || d.Policy == "" {
		// Remaining may be unknown, and reads 0: a rule's failure mode
		// decided (Redis down), or no rule applied.
		fmt.Fprintf(w, "hello, %s\n", who)
		return
	}
	fmt.Fprintf(w, "hello, %s: %d of %d left (%s)\n", who, d.Remaining, d.Limit, d.Policy)
}

// healthz answers load balancers' probes, which are not checked.
func healthz(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok\n") }
