package client

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"github.com/tollgate/tollgate"
)

// DefaultAdminTimeout bounds one admin API call unless
// AdminOptions.Timeout says otherwise.
const DefaultAdminTimeout = 30 * time.Second

// AdminOptions configures an AdminClient. The zero value is ready to use.
type AdminOptions struct {
	// Token is a session token from an earlier login, if you have one;
	// otherwise call Login.
	Token string
	// Timeout bounds one call (default DefaultAdminTimeout).
	Timeout time.Duration
	// HTTPClient sends the calls (default: a client of its own).
	HTTPClient *http.Client
}

// AdminClient is a client of the admin API (cmd/admin serve, under
// /api/v1). It is safe for concurrent use. Errors of the server are
// *ProblemError (a 404 is also another tenant's resource), wrapped with
// the call that failed.
type AdminClient struct {
	base    string
	http    *http.Client
	timeout time.Duration

	mu    sync.RWMutex
	token string
}

// NewAdmin returns a client of the admin server at baseURL (e.g.
// "http://tollgate-admin:8081"). It fails when baseURL is not an http(s)
// URL.
func NewAdmin(baseURL string, opts AdminOptions) (*AdminClient, error) {
	u, err := parseBaseURL(baseURL)
	if err != nil {
		return nil, err
	}
	a := &AdminClient{base: u + "/api/v1", http: opts.HTTPClient, timeout: opts.Timeout, token: opts.Token}
	if a.http == nil {
		a.http = &http.Client{Transport: http.DefaultTransport.(*http.Transport).Clone(), CheckRedirect: noRedirects}
	}
	if a.timeout <= 0 {
		a.timeout = DefaultAdminTimeout
	}
	return a, nil
}

// Token returns the session token the client sends ("" before Login).
func (a *AdminClient) Token() string {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.token
}

// SetToken makes the client send token, a session token from POST
// /api/v1/login (Login does this itself).
func (a *AdminClient) SetToken(token string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.token = token
}

// Login logs in with email and password and makes the client use the
// session it gets. Failed attempts are limited by the server: a 429
// *ProblemError has RetryAfter set.
func (a *AdminClient) Login(ctx context.Context, email, password string) (*LoginResponse, error) {
	in := struct {
		Email    string `json:"email"`
		Password string `json:"password"`
	}{email, password}
	out, err := call[LoginResponse](ctx, a, http.MethodPost, "/login", nil, in, "login")
	if err != nil {
		return nil, err
	}
	a.SetToken(out.Token)
	return out, nil
}

// ListOptions pages a list: Limit 1–200 (0: the server's default, 50) and
// Cursor, the NextCursor of the previous page ("" for the first).
type ListOptions struct {
	Limit  int
	Cursor string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	return q
}

// Page is one page of a list. NextCursor is "" on the last page.
type Page[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

// ListPlans lists plans by name (operators only).
func (a *AdminClient) ListPlans(ctx context.Context, opts ListOptions) (*Page[Plan], error) {
	return call[Page[Plan]](ctx, a, http.MethodGet, "/plans", opts.query(), nil, "list plans")
}

// GetPlan reads a plan (operators only).
func (a *AdminClient) GetPlan(ctx context.Context, id int64) (*Plan, error) {
	return call[Plan](ctx, a, http.MethodGet, "/plans/"+strconv.FormatInt(id, 10), nil, nil, fmt.Sprintf("get plan %d", id))
}

// TenantQuery filters ListTenants; zero fields do not filter.
type TenantQuery struct {
	ListOptions
	// Search is a tenant's ID or part of its name (any case).
	Search string
	// Status is "active" or "suspended".
	Status string
	PlanID int64
}

// ListTenants lists or searches tenants by name (operators only).
func (a *AdminClient) ListTenants(ctx context.Context, query TenantQuery) (*Page[Tenant], error) {
	q := query.query()
	if query.Search != "" {
		q.Set("q", query.Search)
	}
	if query.Status != "" {
		q.Set("status", query.Status)
	}
	if query.PlanID != 0 {
		q.Set("plan_id", strconv.FormatInt(query.PlanID, 10))
	}
	return call[Page[Tenant]](ctx, a, http.MethodGet, "/tenants", q, nil, "list tenants")
}

// CreateTenant creates a tenant named name on the plan planID (operators
// only). A taken name is a 409.
func (a *AdminClient) CreateTenant(ctx context.Context, name string, planID int64) (*Tenant, error) {
	in := struct {
		Name   string `json:"name"`
		PlanID int64  `json:"plan_id"`
	}{name, planID}
	return call[Tenant](ctx, a, http.MethodPost, "/tenants", nil, in, fmt.Sprintf("create tenant %q", name))
}

// KeyInput describes a key to issue. Every field is optional.
type KeyInput struct {
	Name string `json:"name,omitempty"`
	// Metadata holds up to 50 string pairs.
	Metadata map[string]string `json:"metadata,omitempty"`
	// ExpiresAt, in the future; zero for no expiry.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
}

// IssueKey issues an API key of the tenant (operators and the tenant's
// admins). The secret is in the answer only: it is never stored.
func (a *AdminClient) IssueKey(ctx context.Context, tenantID string, in KeyInput) (*KeySecret, error) {
	return call[KeySecret](ctx, a, http.MethodPost, "/tenants/"+url.PathEscape(tenantID)+"/keys", nil, in, fmt.Sprintf("issue key for tenant %s", tenantID))
}

// ListKeys lists the tenant's keys, newest first, by display prefix.
func (a *AdminClient) ListKeys(ctx context.Context, tenantID string, opts ListOptions) (*Page[Key], error) {
	return call[Page[Key]](ctx, a, http.MethodGet, "/tenants/"+url.PathEscape(tenantID)+"/keys", opts.query(), nil, fmt.Sprintf("list keys of tenant %s", tenantID))
}

// RevokeKey revokes a key at once (operators and the tenant's admins);
// checks with it are denied with ReasonKeyRevoked within a second.
func (a *AdminClient) RevokeKey(ctx context.Context, tenantID, keyID string) (*Key, error) {
	path := "/tenants/" + url.PathEscape(tenantID) + "/keys/" + url.PathEscape(keyID) + "/revoke"
	return call[Key](ctx, a, http.MethodPost, path, nil, nil, fmt.Sprintf("revoke key %s", keyID))
}

// UsageTotals returns every tenant's and tier's usage in [from, to)
// (operators only), widened to whole minutes. A zero from is 24 hours
// before to; a zero to is now.
func (a *AdminClient) UsageTotals(ctx context.Context, from, to time.Time) (*UsageTotals, error) {
	q := url.Values{}
	if !from.IsZero() {
		q.Set("from", from.Format(time.RFC3339Nano))
	}
	if !to.IsZero() {
		q.Set("to", to.Format(time.RFC3339Nano))
	}
	return call[UsageTotals](ctx, a, http.MethodGet, "/usage/totals", q, nil, "usage totals")
}

// GetStatement returns the tenant's statement for month ("2026-10", UTC):
// frozen when the month is closed, otherwise computed from current usage
// (Status "open").
func (a *AdminClient) GetStatement(ctx context.Context, tenantID, month string) (*Statement, error) {
	path := "/statements/" + url.PathEscape(tenantID) + "/" + url.PathEscape(month)
	return call[Statement](ctx, a, http.MethodGet, path, url.Values{"format": {"json"}}, nil, fmt.Sprintf("statement of tenant %s for %s", tenantID, month))
}

// CreditGrantInput is a grant of prepaid credits to a tenant
// (GrantCredits).
type CreditGrantInput struct {
	// Amount is units of the tenant's plan, 1 to 2^50.
	Amount int64 `json:"amount"`
	// ExpiresAt is when what is left of the grant expires; zero: never.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Priority orders grants that expire together (higher is drawn
	// first), -1000 to 1000.
	Priority int `json:"priority,omitempty"`
	// Cause says why (the ledger keeps it); required.
	Cause string `json:"cause"`
	// IdempotencyKey, when set, makes the grant once (see AdminClient's
	// GrantCredits); it is sent as the Idempotency-Key header.
	IdempotencyKey string `json:"-"`
}

// GrantCredits grants (tops up) the tenant's prepaid credits (operators
// only): the amount pays any debt first, then adds to the balance, and
// every api process draws on it within a second.
//
// A call that fails on the network or times out may have granted or not.
// To retry it safely, set in.IdempotencyKey to a key that names this one
// grant (1–200 printable ASCII characters: a UUID made once per grant, or
// the reference of the order it pays for) and retry with the same key
// and values: however many calls arrive, the tenant is granted once, and
// every call answers that grant, with Replayed set on the answers to the
// calls that granted nothing. Keys are the tenant's, kept for good. The
// same key with other values (or an adjustment's key) is a 409
// *ProblemError naming Idempotency-Key, a key that is not one a 422.
// Without a key, every call grants.
func (a *AdminClient) GrantCredits(ctx context.Context, tenantID string, in CreditGrantInput) (*CreditGrant, error) {
	path := "/tenants/" + url.PathEscape(tenantID) + "/credits/grants"
	return callOnce[CreditGrant](ctx, a, path, in.IdempotencyKey, in, fmt.Sprintf("grant credits to tenant %s", tenantID))
}

// CreditAdjustInput is a correction of a tenant's balance (AdjustCredits).
type CreditAdjustInput struct {
	// Units to add (negative: to take); not 0, within ±2^50.
	Units int64 `json:"units"`
	// Cause says why (the ledger keeps it); required.
	Cause string `json:"cause"`
	// IdempotencyKey, when set, makes the adjustment once, as a grant's
	// (GrantCredits); it is sent as the Idempotency-Key header.
	IdempotencyKey string `json:"-"`
}

// AdjustCredits corrects the tenant's prepaid balance by ± units
// (operators only): units taken come from its grants soonest-expiring
// first, units added pay any debt, then return to its grants. Retry it
// with in.IdempotencyKey as GrantCredits: a replayed answer is the first
// adjustment's, with the balance it left then.
func (a *AdminClient) AdjustCredits(ctx context.Context, tenantID string, in CreditAdjustInput) (*CreditAdjustment, error) {
	path := "/tenants/" + url.PathEscape(tenantID) + "/credits/adjustments"
	return callOnce[CreditAdjustment](ctx, a, path, in.IdempotencyKey, in, fmt.Sprintf("adjust credits of tenant %s", tenantID))
}

// maxAdminBody bounds an answer read; statements of busy tenants are the
// largest.
const maxAdminBody = 64 << 20

// do sends one call with the session token and header's fields (nil:
// none) and decodes a 2xx answer into out (when not nil), returning its
// header. Errors: *ProblemError for other statuses, or a transport or
// decoding error.
func (a *AdminClient) do(ctx context.Context, method, path string, query url.Values, header http.Header, in, out any) (http.Header, error) {
	target := a.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	return roundTrip(ctx, a.http, a.timeout, method, target, a.Token(), header, in, out, maxAdminBody)
}

// call sends one call (see do) and returns the answer it decoded; errors
// are wrapped with what, the call that failed.
func call[T any](ctx context.Context, a *AdminClient, method, path string, query url.Values, in any, what string) (*T, error) {
	var out T
	if _, err := a.do(ctx, method, path, query, nil, in, &out); err != nil {
		return nil, fmt.Errorf("tollgate: %s: %w", what, err)
	}
	return &out, nil
}

// replayable is the answer of a call that may be replayed: it records
// whether it was.
type replayable[T any] interface {
	*T
	setReplayed(bool)
}

// callOnce posts in to path as call does, with key as its Idempotency-Key
// when not empty, and marks the answer replayed when the server replayed
// the answer to an earlier call with the key (Idempotent-Replayed: true).
func callOnce[T any, P replayable[T]](ctx context.Context, a *AdminClient, path, key string, in any, what string) (*T, error) {
	var header http.Header
	if key != "" {
		header = http.Header{"Idempotency-Key": {key}}
	}
	var out T
	answer, err := a.do(ctx, http.MethodPost, path, nil, header, in, &out)
	if err != nil {
		return nil, fmt.Errorf("tollgate: %s: %w", what, err)
	}
	P(&out).setReplayed(answer.Get("Idempotent-Replayed") == "true")
	return &out, nil
}

// The types below mirror the schemas of the same names in openapi.yaml.
// Optional times are zero when absent.

// LoginResponse is a session: send Token as "Authorization: Bearer".
type LoginResponse struct {
	Token     string    `json:"token"`
	TokenType string    `json:"token_type"`
	ExpiresAt time.Time `json:"expires_at"`
	User      User      `json:"user"`
}

// User is an admin user.
type User struct {
	ID    string `json:"id"`
	Email string `json:"email"`
	// Role is operator, tenant_admin or tenant_viewer.
	Role string `json:"role"`
	// TenantID is the tenant of tenant users.
	TenantID   string    `json:"tenant_id,omitempty"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
	DisabledAt time.Time `json:"disabled_at,omitzero"`
}

// Plan is what a tenant's callers are granted and what they pay. Money is
// integer minor units of Currency.
type Plan struct {
	ID               int64       `json:"id"`
	Name             string      `json:"name"`
	DisplayName      string      `json:"display_name"`
	Currency         string      `json:"currency"`
	BaseFeeMinor     int64       `json:"base_fee_minor"`
	IncludedUnits    int64       `json:"included_units"`
	OverageUnitMinor int64       `json:"overage_unit_minor"`
	Tiers            []PriceTier `json:"tiers"`
	// QuotaMode is none, hard or overage.
	QuotaMode  string    `json:"quota_mode"`
	Rules      []Rule    `json:"rules"`
	ArchivedAt time.Time `json:"archived_at,omitzero"`
	CreatedAt  time.Time `json:"created_at"`
	UpdatedAt  time.Time `json:"updated_at"`
}

// PriceTier prices overage units up to and including UpTo at UnitMinor
// each; UpTo is 0 for "and beyond" (null in JSON; last tier only).
type PriceTier struct {
	UpTo      int64 `json:"up_to"`
	UnitMinor int64 `json:"unit_minor"`
}

// Rule is one limit of a plan.
type Rule struct {
	ID   int64  `json:"id"`
	Name string `json:"name"`
	// Algorithm is gcra, token_bucket, leaky_bucket, fixed_window,
	// sliding_window_log or sliding_window_counter.
	Algorithm string `json:"algorithm"`
	Limit     int64  `json:"limit"`
	PeriodUS  int64  `json:"period_us"`
	Burst     int64  `json:"burst"`
	// Resource is "*" or "METHOD /path", a trailing * matching a prefix.
	Resource string `json:"resource"`
	// Scope is key, tenant or ip.
	Scope string `json:"scope"`
	// Mode is enforce or shadow.
	Mode string `json:"mode"`
	// FailureMode is open or closed.
	FailureMode string      `json:"failure_mode"`
	Options     RuleOptions `json:"options"`
	// RegionScope is regional (or ""), global_shared or global_split:
	// the rule's consistency across a deployment's regions.
	RegionScope string `json:"region_scope,omitempty"`
	// MinShare is a global_split rule's least allotment per region.
	MinShare int64 `json:"min_share,omitempty"`
}

// RuleOptions are the options of some algorithms.
type RuleOptions struct {
	LeakyMode string `json:"leaky_mode,omitempty"`
	Calendar  string `json:"calendar,omitempty"`
	Anchor    string `json:"anchor,omitempty"`
}

// Tenant is a customer; its API keys share its plan.
type Tenant = tollgate.Tenant

// Key is an API key's record; the secret is never stored.
type Key struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Name     string `json:"name"`
	// Prefix is the secret's first 11 characters, for display.
	Prefix     string            `json:"prefix"`
	Metadata   map[string]string `json:"metadata"`
	CreatedAt  time.Time         `json:"created_at"`
	ExpiresAt  time.Time         `json:"expires_at,omitzero"`
	RevokedAt  time.Time         `json:"revoked_at,omitzero"`
	LastUsedAt time.Time         `json:"last_used_at,omitzero"`
}

// KeySecret is an issued key and its secret, shown this once.
type KeySecret struct {
	Key    Key    `json:"key"`
	Secret string `json:"secret"`
	// Previous is the key a rotation replaced.
	Previous *Key `json:"previous,omitempty"`
}

// Counts are decisions and units (the checks' costs) by outcome. Allowed
// units are what gets billed.
type Counts = tollgate.Counts

// UsageTotals is every decision's Counts in [From, To).
type UsageTotals struct {
	From   time.Time `json:"from"`
	To     time.Time `json:"to"`
	Totals Totals    `json:"totals"`
}

// Totals are Counts overall, by tenant (most allowed units first) and by
// tier (authenticated, anonymous).
type Totals = tollgate.Totals

// TenantTotal is one tenant's Counts; TenantID is "" for decisions without
// a tenant (anonymous callers, unknown keys).
type TenantTotal = tollgate.TenantTotal

// Statement is a tenant's month (UTC), priced. Money is integer minor
// units of Currency.
type Statement struct {
	TenantID    string    `json:"tenant_id"`
	TenantName  string    `json:"tenant_name"`
	Month       string    `json:"month"`
	PeriodStart time.Time `json:"period_start"`
	PeriodEnd   time.Time `json:"period_end"`
	Currency    string    `json:"currency"`
	// Status is open (may still change) or closed (frozen).
	Status                string       `json:"status"`
	ClosedAt              time.Time    `json:"closed_at,omitzero"`
	Usage                 Counts       `json:"usage"`
	UsageByKeyAndResource []UsageLine  `json:"usage_by_key_and_resource"`
	PlanPeriods           []PlanPeriod `json:"plan_periods"`
	BaseFeeMinor          int64        `json:"base_fee_minor"`
	OverageMinor          int64        `json:"overage_minor"`
	TotalMinor            int64        `json:"total_minor"`
	Rules                 string       `json:"rules"`
	LateUsage             *Counts      `json:"late_usage,omitempty"`
}

// UsageLine is a month's usage by one key of one resource.
type UsageLine = tollgate.UsageLine

// PlanPeriod is the charge of one span of the month on one plan.
type PlanPeriod = tollgate.PlanPeriod

// OverageLine prices overage units FromUnit..ToUnit (1-based, inclusive).
type OverageLine = tollgate.OverageLine

// CreditGrant is a grant of prepaid credits.
type CreditGrant struct {
	ID       string `json:"id"`
	TenantID string `json:"tenant_id"`
	Amount   int64  `json:"amount"`
	// Remaining is what consumption has left of it (0 once expired).
	Remaining int64 `json:"remaining"`
	Priority  int   `json:"priority"`
	// ExpiresAt is when what is left expires (zero: never); ExpiredAt
	// when it did.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	ExpiredAt time.Time `json:"expired_at,omitzero"`
	Cause     string    `json:"cause"`
	CreatedAt time.Time `json:"created_at"`
	// Replayed is true when the grant was made by an earlier call with the
	// same idempotency key: this call granted nothing. The grant is as
	// it was answered then.
	Replayed bool `json:"-"`
}

func (g *CreditGrant) setReplayed(replayed bool) { g.Replayed = replayed }

// CreditAdjustment is a correction of a tenant's balance and the ledger
// balance after it.
type CreditAdjustment struct {
	TenantID string `json:"tenant_id"`
	Units    int64  `json:"units"`
	Cause    string `json:"cause"`
	Balance  int64  `json:"balance"`
	// Replayed is true when the adjustment was made by an earlier call
	// with the same idempotency key: this call adjusted nothing, and
	// Balance is the balance the adjustment left then.
	Replayed bool `json:"-"`
}

func (adj *CreditAdjustment) setReplayed(replayed bool) { adj.Replayed = replayed }
