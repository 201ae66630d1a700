package adminapi

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/httpx"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/ui"
	"github.com/tollgate/tollgate/internal/usage"
)

// Config is what the admin API needs.
type Config struct {
	DB *pgxpool.Pool
	// Usage answers the usage queries (series, top keys, totals…);
	// statements and closing months are billing's, on DB.
	Usage *usage.Reader
	Log   *slog.Logger
	// SessionSecret signs session JWTs (HS256, at least
	// auth.MinSessionSecretLen bytes); SessionTTL is their lifetime.
	SessionSecret []byte
	SessionTTL    time.Duration
	// LoginStore keeps the login limiter's state: Redis, so that every
	// admin process shares it, or a limiter.MemoryStore. LoginPerMinute is
	// the per-(network, email) limit on failed attempts, from which the
	// others derive; KeyPrefix starts its keys.
	LoginStore     limiter.Store
	LoginPerMinute int
	KeyPrefix      string
	// SecretKeys seal the service-token signing keys; without them tokens
	// cannot be issued.
	SecretKeys *auth.SecretKeys
	// UsageLag reports how far behind the usage worker is, on the
	// console's overview; nil when the server has no Redis.
	UsageLag func(ctx context.Context) (usage.Lag, error)
	// Webhooks checks webhook endpoints' URLs (private addresses refused
	// unless it allows them).
	Webhooks events.Guard
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// Metrics is served at /metrics (an empty registry when nil).
	Metrics *prometheus.Registry
	// Invoicing turns closed statements into invoices at the payment
	// provider and takes its webhooks (off when nil).
	Invoicing *billing.Invoicing
	// Region is the deployment's regions (the zero value: one region):
	// plans may give rules a global region scope only when it has them.
	Region region.Config
}

// readySchemaEvery is how often /readyz asks the database for its schema
// version: the answer is at most this old.
const readySchemaEvery = 5 * time.Second

// handleReady answers 200 when Postgres answers with the schema this
// binary expects, 503 otherwise, saying under "postgres" what is wrong: a
// schema rolled back (or forward) under a running server fails every
// query its background work makes, and must take it out of service.
func handleReady(log *slog.Logger, db *pgxpool.Pool, schema *postgres.SchemaCheck) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		state := "ok"
		if err := db.Ping(ctx); err != nil {
			state = "unreachable"
		} else if err := schema.Check(ctx); errors.Is(err, postgres.ErrSchemaMismatch) {
			state = err.Error()
		} else if err != nil {
			state = "unreachable"
		}
		status := http.StatusOK
		if state != "ok" {
			status = http.StatusServiceUnavailable
		}
		httpx.JSON(w, r, log, status, map[string]string{"postgres": state})
	}
}

// NewHandler returns the admin server's routes, every one of them listed
// here: the admin API under /api/v1 and the web console (internal/ui) at /.
// Each route names who may call it (see access.go): public, signedIn (any
// role), operator, or for routes under /tenants/{tenantID}: tenantRead
// (the tenant's users), tenantKeys (its tenant_admins) and tenantOps
// (operators only). The console's routes pass the same checks, answering
// with HTML pages instead of problem+json.
//
// A route whose answer is one read or one change of a feature names that
// method here, through the generic handlers (handlePlanRead, handlePlanPut,
// handleTenantRead, handleTenantChange, handleTenantPage, and handlePage
// with the list's filter); the method's documentation says what it does. A route with more to do has a handler
// of its own, in the file of its noun.
func NewHandler(cfg Config) http.Handler {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.LoginStore == nil {
		cfg.LoginStore = limiter.NewMemoryStore(nil)
	}
	if cfg.Metrics == nil {
		cfg.Metrics = prometheus.NewRegistry()
	}
	log, db, us, now := cfg.Log, cfg.DB, cfg.Usage, cfg.Now
	ps, ts, as, audits := plans.NewStore(db), tenants.NewStore(db), auth.NewStore(db), audit.NewStore(db)
	plansOps, tenantsOps, authOps := plans.NewOps(db).InRegions(cfg.Region), tenants.NewOps(db, now).InRegions(cfg.Region), auth.NewOps(db, cfg.SecretKeys)
	qs, quotaOps := quota.NewStore(db), quota.NewOps(db)
	es, eventsOps := events.NewStore(db), events.NewOps(db, now, cfg.Webhooks).WithSecretKeys(cfg.SecretKeys)
	cs, creditsOps := credits.NewStore(db), credits.NewOps(db, now)
	inv := cfg.Invoicing
	if inv == nil {
		inv = billing.NewInvoicing(db, billing.InvoicingConfig{Log: log}, now)
	}
	bs, billingOps := billing.NewStore(db, now), billing.NewOps(db, now).WithInvoicing(inv)
	sessions := &sessionAuth{store: as, ops: authOps, secret: cfg.SessionSecret, ttl: cfg.SessionTTL, now: now,
		logins: &loginLimiter{store: cfg.LoginStore, prefix: cfg.KeyPrefix, perMinute: int64(cfg.LoginPerMinute), log: log}}

	r := chi.NewRouter()
	console := ui.New(ui.Config{DB: db, Usage: us, UsageLag: cfg.UsageLag, Log: log, Secret: cfg.SessionSecret,
		Plans: plansOps, Tenants: tenantsOps, Auth: authOps, Events: eventsOps, Quota: quotaOps, Credits: creditsOps,
		Billing: billingOps, Invoicing: inv,
		Sessions: consoleSessions{sessions}, Now: now})
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			httpx.NotFound(log)(w, r)
			return
		}
		console.Headers(http.HandlerFunc(console.NotFound)).ServeHTTP(w, r)
	})
	apiMethodNotAllowed, consoleMethodNotAllowed := httpx.MethodNotAllowed(r), console.Headers(console.MethodNotAllowed(r))
	r.MethodNotAllowed(func(w http.ResponseWriter, req *http.Request) {
		// The console's paths answer with its pages; the API's and the
		// probes' (documented in openapi.yaml) with problem+json.
		if p := req.URL.Path; strings.HasPrefix(p, "/api/") || p == "/healthz" || p == "/readyz" || p == "/metrics" {
			apiMethodNotAllowed(w, req)
			return
		}
		consoleMethodNotAllowed.ServeHTTP(w, req)
	})
	r.Get("/healthz", httpx.Healthz)
	r.Get("/readyz", handleReady(log, db, postgres.NewSchemaCheck(db, readySchemaEvery)))
	// A collector that fails (a query timing out) leaves its metrics out,
	// counted in promhttp_metric_handler_errors_total, not the scrape.
	r.Method("GET", "/metrics", promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{Registry: cfg.Metrics, ErrorHandling: promhttp.ContinueOnError}))

	r.Route("/api/v1", func(r chi.Router) {
		fail := apiError(log)
		r.Use(noStore, crossOriginProtection(log), httpx.TextOnly(fail), sessions.identify(fail))
		public, signedIn, operator, tenantRead, tenantKeys, tenantOps := accessLevels(r, fail)

		public.Method("POST", "/login", handleLogin(log, sessions))
		public.Method("POST", "/logout", handleLogout(log, sessions))
		signedIn.Method("GET", "/me", handleMe(log))

		operator.Method("GET", "/plans", handlePage(log, fromQuery(planFilter), ps.ListPage))
		operator.Method("POST", "/plans", handlePlanCreate(log, plansOps))
		operator.Method("GET", "/plans/{planID}", handlePlanRead(log, ps.Get))
		operator.Method("PUT", "/plans/{planID}", handlePlanPut(log, plansOps.Update))
		operator.Method("DELETE", "/plans/{planID}", handlePlanDelete(log, plansOps))
		operator.Method("POST", "/plans/{planID}/archive", handlePlanArchive(log, plansOps, true))
		operator.Method("POST", "/plans/{planID}/unarchive", handlePlanArchive(log, plansOps, false))
		operator.Method("GET", "/plans/{planID}/quota", handlePlanRead(log, qs.PlanSettings))
		operator.Method("PUT", "/plans/{planID}/quota", handlePlanPut(log, quotaOps.SetPlan))
		operator.Method("GET", "/plans/{planID}/credits", handlePlanRead(log, cs.PlanSettingsOrOff))
		operator.Method("PUT", "/plans/{planID}/credits", handlePlanPut(log, creditsOps.SetPlan))
		operator.Method("GET", "/plans/{planID}/billing", handlePlanRead(log, inv.PlanBilling))
		operator.Method("PUT", "/plans/{planID}/billing", handlePlanPut(log, inv.SetPlanBilling))

		operator.Method("GET", "/tenants", handlePage(log, fromQuery(tenantFilter), ts.ListPage))
		operator.Method("POST", "/tenants", handleTenantCreate(log, tenantsOps))
		tenantRead.Method("GET", "/tenants/{tenantID}", handleTenantRead(log, ts.Get))
		tenantOps.Method("POST", "/tenants/{tenantID}/plan", handleTenantChange(log, tenantsOps.SetPlan))
		tenantRead.Method("GET", "/tenants/{tenantID}/plan-changes", handleTenantPage(log, ts, ts.PlanHistory))
		tenantOps.Method("POST", "/tenants/{tenantID}/suspend", handleTenantStatus(log, tenantsOps, true))
		tenantOps.Method("POST", "/tenants/{tenantID}/resume", handleTenantStatus(log, tenantsOps, false))
		tenantRead.Method("GET", "/tenants/{tenantID}/overrides", handleOverridesGet(log, ts))
		tenantOps.Method("PUT", "/tenants/{tenantID}/overrides", handleTenantChange(log, tenantsOps.SetOverrides))
		// A tenant's admins set its thresholds and may lower its spend cap
		// (quota.Ops.SetTenant refuses them a higher one).
		tenantRead.Method("GET", "/tenants/{tenantID}/quota", handleTenantRead(log, qs.TenantSettings))
		tenantKeys.Method("PUT", "/tenants/{tenantID}/quota", handleTenantChange(log, quotaOps.SetTenant))
		// Prepaid credits: the tenant's users read them, operators grant
		// and adjust.
		tenantRead.Method("GET", "/tenants/{tenantID}/credits", handleTenantRead(log, cs.Balance))
		tenantRead.Method("GET", "/tenants/{tenantID}/credits/ledger", handleCreditsLedger(log, ts, cs))
		tenantOps.Method("POST", "/tenants/{tenantID}/credits/grants", handleCreditsGrant(log, creditsOps))
		tenantOps.Method("POST", "/tenants/{tenantID}/credits/adjustments", handleCreditsAdjust(log, creditsOps))

		tenantRead.Method("GET", "/tenants/{tenantID}/keys", handleTenantPage(log, ts, ts.ListKeysPage))
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys", handleKeyCreate(log, tenantsOps))
		tenantRead.Method("GET", "/tenants/{tenantID}/keys/{keyID}", handleKeyGet(log, ts))
		tenantKeys.Method("PATCH", "/tenants/{tenantID}/keys/{keyID}", handleKeyUpdate(log, tenantsOps))
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys/{keyID}/revoke", handleKeyRevoke(log, tenantsOps))
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys/{keyID}/rotate", handleKeyRotate(log, tenantsOps))

		operator.Method("GET", "/service-tokens", handleServiceTokenList(log, as))
		operator.Method("POST", "/service-tokens", handleServiceTokenCreate(log, authOps))
		operator.Method("POST", "/service-tokens/{tokenID}/revoke", handleServiceTokenRevoke(log, authOps))

		operator.Method("GET", "/users", handlePage(log, fromQuery(userFilter), as.ListUsersPage))
		operator.Method("POST", "/users", handleUserCreate(log, authOps))
		operator.Method("POST", "/users/{userID}/disable", handleUserDisable(log, authOps))
		operator.Method("POST", "/users/{userID}/sessions/revoke", handleUserSessionsRevoke(log, authOps))

		operator.Method("GET", "/audit", handlePage(log, fromQuery(auditFilter), audits.List))

		// Webhook endpoints and events: the operators' (everything), and
		// each tenant's, whose admins manage its endpoints.
		webhookRoutes(operator, operator, "", operatorScope, eventsOps, es, log)
		webhookRoutes(tenantRead, tenantKeys, "/tenants/{tenantID}", tenantScope(ts), eventsOps, es, log)

		// Usage and statements: each handler asks authorizeUsage, which
		// lets tenant users read their own tenant's and operators
		// everyone's (and the operator-wide views).
		usageRoutes(signedIn, usageReads{us, bs, ts}, authorizeUsage, log)
		operator.Method("POST", "/months/{month}/close", handleMonthClose(log, billingOps))

		// Invoices at the payment provider: a tenant's billing account,
		// invoices and top-ups (its users read them, operators link; its
		// admins and operators top up, the admins at the plan's price),
		// the month's reconciliation, and the provider's webhooks
		// (signed; no session).
		tenantRead.Method("GET", "/tenants/{tenantID}/billing", handleTenantBilling(log, ts, inv))
		tenantOps.Method("PUT", "/tenants/{tenantID}/billing/account", handleTenantChange(log, inv.LinkAccount))
		tenantKeys.Method("POST", "/tenants/{tenantID}/billing/top-ups", handleTopUpOpen(log, inv))
		operator.Method("GET", "/months/{month}/reconciliation", handleReconciliation(log, inv))
		public.Method("POST", "/billing/stripe/webhook", handleProviderWebhook(log, inv))
	})

	// The web console: pages for people, on the same session cookie and
	// the same access checks as the API. The route decides who may; every
	// change it makes is then the same operation the API's handler calls
	// (plans.Ops, tenants.Ops, auth.Ops, billing.Ops), and
	// sign-in and sign-out go through the same sessionAuth.
	r.Group(func(r chi.Router) {
		fail := console.Error
		r.Use(console.Headers, httpx.TextOnly(fail), sessions.identify(fail), console.CSRF)
		public, signedIn, operator, tenantRead, tenantKeys, tenantOps := accessLevels(r, fail)

		public.Method("GET", "/static/*", console.Static())
		public.Method("GET", "/login", console.LoginPage())
		public.Method("POST", "/login", console.Login())
		signedIn.Method("POST", "/logout", console.Logout())
		signedIn.Method("GET", "/", console.Home()) // operators' overview; tenant users go to their tenant

		operator.Method("GET", "/plans", console.PlanList())
		operator.Method("GET", "/plans/new", console.PlanNew())
		operator.Method("POST", "/plans", console.PlanSave(true))
		operator.Method("GET", "/plans/{planID}", console.PlanView())
		operator.Method("GET", "/plans/{planID}/edit", console.PlanEdit())
		operator.Method("POST", "/plans/{planID}", console.PlanSave(false))
		operator.Method("POST", "/plans/{planID}/quota", console.PlanQuotaSave())
		operator.Method("POST", "/plans/{planID}/billing", console.PlanBillingSave())
		operator.Method("POST", "/plans/{planID}/archive", console.PlanArchive(true))
		operator.Method("POST", "/plans/{planID}/unarchive", console.PlanArchive(false))

		operator.Method("GET", "/tenants", console.TenantList())
		operator.Method("POST", "/tenants", console.TenantCreate())
		tenantRead.Method("GET", "/tenants/{tenantID}", console.TenantView())
		tenantOps.Method("POST", "/tenants/{tenantID}/plan", console.TenantSetPlan())
		tenantOps.Method("POST", "/tenants/{tenantID}/suspend", console.TenantStatus(true))
		tenantOps.Method("POST", "/tenants/{tenantID}/resume", console.TenantStatus(false))
		tenantOps.Method("GET", "/tenants/{tenantID}/overrides", console.OverridesEdit())
		tenantOps.Method("POST", "/tenants/{tenantID}/overrides", console.OverridesSave())
		tenantRead.Method("GET", "/tenants/{tenantID}/credits", console.Credits())
		tenantOps.Method("POST", "/tenants/{tenantID}/credits", console.CreditsGrant())

		operator.Method("GET", "/keys", console.AllKeys())
		tenantRead.Method("GET", "/tenants/{tenantID}/keys", console.KeyList())
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys", console.KeyIssue())
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys/{keyID}/rotate", console.KeyRotate())
		tenantKeys.Method("POST", "/tenants/{tenantID}/keys/{keyID}/revoke", console.KeyRevoke())

		operator.Method("GET", "/usage", console.Usage())
		operator.Method("POST", "/months/{month}/close", console.MonthClose())
		tenantRead.Method("GET", "/tenants/{tenantID}/usage", console.TenantUsage())
		tenantRead.Method("GET", "/tenants/{tenantID}/statements", console.StatementList())
		tenantRead.Method("GET", "/tenants/{tenantID}/statements/{month}", console.StatementView())
		tenantRead.Method("GET", "/tenants/{tenantID}/billing", console.Billing())
		tenantOps.Method("POST", "/tenants/{tenantID}/billing/account", console.BillingLink())
		tenantKeys.Method("POST", "/tenants/{tenantID}/billing/top-ups", console.BillingTopUp())
		operator.Method("GET", "/months/{month}/reconciliation", console.Reconciliation())

		operator.Method("GET", "/service-tokens", console.TokenList())
		operator.Method("POST", "/service-tokens", console.TokenIssue())
		operator.Method("POST", "/service-tokens/{tokenID}/revoke", console.TokenRevoke())
		operator.Method("GET", "/users", console.UserList())
		operator.Method("POST", "/users", console.UserCreate())
		operator.Method("POST", "/users/{userID}/disable", console.UserAction(true))
		operator.Method("POST", "/users/{userID}/sessions/revoke", console.UserAction(false))
		operator.Method("GET", "/audit", console.AuditList())

		// Webhooks: the operators' page of every endpoint, and each
		// tenant's alerts page with its own endpoints, whose admins set
		// its thresholds and may lower its spend cap.
		operator.Method("GET", "/webhooks", console.Webhooks())
		consoleWebhookRoutes(operator, operator, "", console)
		tenantRead.Method("GET", "/tenants/{tenantID}/alerts", console.Alerts())
		tenantKeys.Method("POST", "/tenants/{tenantID}/alerts/thresholds", console.AlertThresholds())
		tenantKeys.Method("POST", "/tenants/{tenantID}/alerts/spend-cap", console.AlertSpendCap())
		consoleWebhookRoutes(tenantRead, tenantKeys, "/tenants/{tenantID}", console)
	})
	return r
}

// accessLevels returns r behind each access check a route may name (see
// access.go), refusing through fail: the API and the console check their
// routes alike.
func accessLevels(r chi.Router, fail errorWriter) (public, signedIn, operator, tenantRead, tenantKeys, tenantOps chi.Router) {
	public = r
	signedIn = r.With(requireSession(fail))
	operator = signedIn.With(operatorOnly(fail))
	tenantRead = signedIn.With(tenant(fail, readTenant))
	tenantKeys = signedIn.With(tenant(fail, manageKeys))
	tenantOps = signedIn.With(tenant(fail, operateTenant))
	return public, signedIn, operator, tenantRead, tenantKeys, tenantOps
}

// consoleWebhookRoutes lists the console's webhook endpoint routes at
// prefix ("" or "/tenants/{tenantID}"): pages on read, forms on change.
func consoleWebhookRoutes(read, change chi.Router, prefix string, console *ui.Console) {
	ep := prefix + "/webhooks"
	one := ep + "/{endpointID}"
	change.Method("POST", ep, console.WebhookCreate())
	read.Method("GET", one, console.WebhookView())
	change.Method("POST", one+"/rotate", console.WebhookRotate())
	change.Method("POST", one+"/disable", console.WebhookDisable(true))
	change.Method("POST", one+"/enable", console.WebhookDisable(false))
	change.Method("POST", one+"/test", console.WebhookTest())
	change.Method("POST", one+"/replay", console.WebhookReplay())
	change.Method("POST", one+"/delete", console.WebhookDelete())
}

// usageReads are what the usage and statement routes read through: the
// usage queries, the statements, and the tenants' names for the totals.
type usageReads struct {
	usage      *usage.Reader
	statements *billing.Store
	tenants    *tenants.Store
}

// usageRoutes are the usage and statement routes, each asking authorize
// who may read what (authorizeUsage; tests pass their own).
func usageRoutes(r chi.Router, s usageReads, authorize Authorize, log *slog.Logger) {
	us, bs, ts := s.usage, s.statements, s.tenants
	r.Method("GET", "/usage/tenants/{tenantID}/series", handleUsageSeries(us, ts, authorize, log))
	r.Method("GET", "/usage/tenants/{tenantID}/top-keys", handleUsageTopKeys(us, ts, authorize, log))
	r.Method("GET", "/usage/tenants/{tenantID}/top-resources", handleUsageTopResources(us, ts, authorize, log))
	r.Method("GET", "/usage/tenants/{tenantID}/rejections", handleUsageRejections(us, ts, authorize, log))
	r.Method("GET", "/usage/totals", handleUsageTotals(us, ts, authorize, log))
	r.Method("GET", "/usage/anonymous/top-ips", handleUsageTopIPs(us, authorize, log))
	r.Method("GET", "/statements", handleUsageStatements(bs, authorize, log))
	r.Method("GET", "/statements/late", handleUsageLate(us, authorize, log))
	r.Method("GET", "/statements/{tenantID}/{month}", handleUsageStatement(bs, authorize, log))
}

// noStore keeps API answers, which hold tenants' data, out of caches.
func noStore(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		next.ServeHTTP(w, r)
	})
}

// crossOriginProtection refuses state-changing requests a browser sends
// from another origin (CSRF through the session cookie). API clients that
// send no Origin or Sec-Fetch-Site header are not affected.
func crossOriginProtection(log *slog.Logger) func(http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpx.Error(w, r, log, tollgate.Errorf(tollgate.EFORBIDDEN, "cross-origin request refused"))
	}))
	return cop.Handler
}
