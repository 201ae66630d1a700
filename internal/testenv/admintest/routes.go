package admintest

import (
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/testenv"
)

// Route is one route of the admin server, as its router lists it.
type Route struct{ Method, Pattern string }

// String is the route as "METHOD /pattern".
func (r Route) String() string { return r.Method + " " + r.Pattern }

// Routes lists the admin server's routes, from its own router
// (adminapi.NewHandler): the web console's when console is true, else
// the API's and the health checks'.
func Routes(t testing.TB, console bool) []Route {
	t.Helper()
	router := adminapi.NewHandler(adminapi.Config{Log: slog.New(slog.DiscardHandler)})
	var routes []Route
	testenv.Must(t, chi.Walk(router.(chi.Routes), func(method, pattern string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		if ConsoleRoute(pattern) == console {
			routes = append(routes, Route{method, pattern})
		}
		return nil
	}))
	return routes
}

// ConsoleRoute reports whether a route of the admin server is the web
// console's: everything but the API and the health checks.
func ConsoleRoute(pattern string) bool {
	return !strings.HasPrefix(pattern, "/api/") && pattern != "/healthz" && pattern != "/readyz" && pattern != "/metrics"
}
