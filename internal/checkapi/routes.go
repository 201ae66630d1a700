package checkapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/snapshot"
)

// Deps is what the check server's handlers use.
type Deps struct {
	Log     *slog.Logger
	Holder  *snapshot.Holder
	Checker *enforce.Checker
	// Registry serves /metrics.
	Registry *prometheus.Registry
	// PingPostgres and PingStore report whether Postgres and the limiter
	// store answer, for /readyz. A PingPostgres error that is
	// postgres.ErrSchemaMismatch (a schema this binary does not expect)
	// is shown as it is; any other only as "unreachable".
	PingPostgres func(context.Context) error
	PingStore    func(context.Context) error
	// Forward configures the forward-auth endpoint.
	Forward ForwardConfig
	// GatewayRefusals counts and logs gateways refused for their own
	// service token; nil: NewHandler makes one, in Registry.
	GatewayRefusals *GatewayRefusals
	// Region is the process's region: a settlement, renewal or release
	// of a hold or lease another region keeps is forwarded to that
	// region's check API (Region.CheckURLs).
	Region region.Config
}

// NewHandler returns the check server's routes, every one of them listed
// here.
func NewHandler(d Deps) http.Handler {
	tokens := enforce.NewTokenVerifier(d.Holder)
	r := chi.NewRouter()
	r.NotFound(httpx.NotFound(d.Log))
	r.MethodNotAllowed(httpx.MethodNotAllowed(r))
	r.Get("/healthz", httpx.Healthz)
	r.Get("/readyz", handleReady(d))
	r.Handle("/metrics", promhttp.HandlerFor(d.Registry, promhttp.HandlerOpts{Registry: d.Registry}))
	r.With(RequireServiceToken(tokens, d.Log)).Post("/v1/check", HandleCheck(d.Checker, d.Log).ServeHTTP)
	regions := newRegionForwarder(d.Region, d.Log)
	r.With(RequireServiceToken(tokens, d.Log)).Post("/v1/settle", HandleSettle(d.Checker, regions, d.Log).ServeHTTP)
	r.With(RequireServiceToken(tokens, d.Log)).Post("/v1/renew", HandleRenew(d.Checker, regions, d.Log).ServeHTTP)
	r.With(RequireServiceToken(tokens, d.Log)).Post("/v1/release", HandleRelease(d.Checker, regions, d.Log).ServeHTTP)
	// Forward-auth answers every method, on its path and below it (Envoy
	// appends the original path).
	refusals := d.GatewayRefusals
	if refusals == nil {
		refusals = NewGatewayRefusals(d.Registry, d.Log)
	}
	forward := RequireGatewayToken(tokens, d.Log, refusals)(HandleForwardAuth(d.Checker, d.Forward, d.Log))
	r.Handle(ForwardAuthPath, forward)
	r.Handle(ForwardAuthPath+"/*", forward)
	// The caller's own key, no service token: its limits and what is left.
	r.Get(MePath, HandleMe(d.Checker, d.Forward, d.Log).ServeHTTP)
	return r
}

// handleReady answers 200 when the snapshot is loaded and the limiter
// store answers, 503 otherwise, naming what is wrong. Postgres is reported
// but does not make the process unready: checks are served from the
// snapshot, so a Postgres outage, or a schema rolled back under the
// process, must not take every API node out of its load balancer.
func handleReady(d Deps) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		checks := map[string]string{"snapshot": "ok", "postgres": "ok", "limiter_store": "ok"}
		ok := true
		if d.Holder.Current() == nil {
			checks["snapshot"], ok = "not loaded", false
		}
		if err := d.PingPostgres(ctx); errors.Is(err, postgres.ErrSchemaMismatch) {
			// Reloads fail until the schema is right again; checks go on
			// from the snapshot loaded before.
			checks["postgres"] = err.Error() + " (serving from the last snapshot)"
		} else if err != nil {
			checks["postgres"] = "unreachable (serving from the last snapshot)"
		}
		if err := d.PingStore(ctx); err != nil {
			checks["limiter_store"], ok = "unreachable", false
		}
		status := http.StatusOK
		if !ok {
			status = http.StatusServiceUnavailable
			d.Log.Warn("not ready", "checks", checks)
		}
		httpx.JSON(w, r, d.Log, status, checks)
	}
}
