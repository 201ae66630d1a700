package events

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Ops makes every change to webhook endpoints: one method per change, a
// typed input, the actor, validation naming the fields, and one
// transaction (audit.Apply) with exactly one audit entry. Scope, as in
// Store, is "" for an operator or the tenant whose endpoints the change
// may reach; whether the actor may make the change at all is decided
// before (internal/access). Safe for concurrent use.
type Ops struct {
	db    postgres.Conn
	now   func() time.Time
	guard Guard
	keys  *auth.SecretKeys
}

// NewOps returns the endpoint operations on db (a pool), with the clock
// now (time.Now when nil) and the guard that checks endpoints' URLs.
func NewOps(db postgres.Conn, now func() time.Time, guard Guard) *Ops {
	if now == nil {
		now = time.Now
	}
	return &Ops{db: db, now: now, guard: guard}
}

// WithSecretKeys returns the operations sealing endpoint secrets with
// keys (TOLLGATE_SECRET_KEY). Without keys, secrets are stored in the
// clear, as an earlier version did, until SealSecrets seals them.
func (o *Ops) WithSecretKeys(keys *auth.SecretKeys) *Ops {
	c := *o
	c.keys = keys
	return &c
}

// storedSecret is what is stored of endpoint id's secret: sealed when the
// operations have keys.
func (o *Ops) storedSecret(id, secret string) (string, error) {
	if o.keys == nil {
		return secret, nil
	}
	return sealSecret(o.keys, id, secret)
}

// RotationOverlap is how long the previous secret keeps signing after a
// rotation: every delivery carries both signatures meanwhile.
const RotationOverlap = 24 * time.Hour

// EndpointInput is a new endpoint: the body of POST
// /webhooks/endpoints and /tenants/{tenantID}/webhooks/endpoints.
type EndpointInput struct {
	URL         string   `json:"url"`
	Description string   `json:"description"`
	EventTypes  []string `json:"event_types"`
	// TenantIDs: an operator's endpoint only (empty: every tenant).
	TenantIDs []string `json:"tenant_ids"`
}

// validate names each invalid field; owner is the tenant making the
// endpoint ("" for an operator).
func (in *EndpointInput) validate(ctx context.Context, g Guard, owner string) error {
	f := map[string]string{}
	in.URL = strings.TrimSpace(in.URL)
	in.Description = strings.TrimSpace(in.Description)
	if in.URL == "" {
		f["url"] = "is required"
	} else if why := g.CheckURL(ctx, in.URL); why != "" {
		f["url"] = why
	}
	if len(in.Description) > 500 {
		f["description"] = "must be at most 500 characters"
	}
	for i, t := range in.EventTypes {
		if !slices.Contains(Types, t) {
			f["event_types["+strconv.Itoa(i)+"]"] = "is not an event type (docs/events.md lists them)"
		}
	}
	if owner != "" && len(in.TenantIDs) > 0 {
		f["tenant_ids"] = "only an operator's endpoint chooses tenants: a tenant's receives its own events"
	}
	for i, id := range in.TenantIDs {
		if !tollgate.IsUUID(id) {
			f["tenant_ids["+strconv.Itoa(i)+"]"] = "is not a tenant ID"
		}
	}
	in.EventTypes, in.TenantIDs = nonNil(in.EventTypes), nonNil(in.TenantIDs)
	return tollgate.Invalid(f)
}

// nonNil returns s sorted without repeats, and never nil: the columns
// are NOT NULL, and an empty list ("every type", "every tenant") is
// stored as an empty array. (slices.Sorted of an empty list is nil.)
func nonNil(s []string) []string {
	if len(s) == 0 {
		return []string{}
	}
	return slices.Compact(slices.Sorted(slices.Values(s)))
}

// IssuedEndpoint is an endpoint with its secret: the answer to creating
// one or rotating its secret, the only time the secret is shown.
type IssuedEndpoint struct {
	Endpoint Endpoint `json:"endpoint"`
	Secret   string   `json:"secret"`
}

// CreateEndpoint makes an endpoint (webhook_endpoint.create) for tenant
// owner's events, or an operator's when owner is "". EINVALID naming
// tenant_ids when one names no tenant.
func (o *Ops) CreateEndpoint(ctx context.Context, by audit.Actor, owner string, in EndpointInput) (IssuedEndpoint, error) {
	if err := in.validate(ctx, o.guard, owner); err != nil {
		return IssuedEndpoint{}, err
	}
	res := IssuedEndpoint{Secret: NewSecret()}
	var err error
	res.Endpoint, err = audit.Create(ctx, o.db, by, "webhook_endpoint.create", EndpointAudit,
		func(tx pgx.Tx) (Endpoint, error) {
			var known int
			if err := tx.QueryRow(ctx, `SELECT count(*) FROM tenants WHERE id = ANY($1::uuid[])`, in.TenantIDs).
				Scan(&known); err != nil {
				return Endpoint{}, fmt.Errorf("events: create endpoint: %w", err)
			}
			if known != len(in.TenantIDs) {
				return Endpoint{}, tollgate.Invalid(map[string]string{"tenant_ids": "names a tenant that does not exist"})
			}
			var id string
			if err := tx.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&id); err != nil {
				return Endpoint{}, fmt.Errorf("events: create endpoint: %w", err)
			}
			stored, err := o.storedSecret(id, res.Secret)
			if err != nil {
				return Endpoint{}, err
			}
			e, err := scanEndpoint(tx.QueryRow(ctx, `INSERT INTO webhook_endpoints
				(id, owner_tenant_id, url, description, event_types, tenant_ids, secret, created_at)
				VALUES ($8::uuid, $1, $2, $3, $4, $5::uuid[], $6, $7) RETURNING `+endpointColumns,
				optional(owner), in.URL, in.Description, in.EventTypes, in.TenantIDs, stored, o.now(), id))
			if err != nil {
				return Endpoint{}, fmt.Errorf("events: create endpoint: %w", postgres.Translate(err))
			}
			return e, nil
		})
	return res, err
}

// RotateSecret gives endpoint id a new secret (webhook_endpoint.rotate);
// the previous one keeps signing, beside it, for RotationOverlap — unless
// the operations' keys cannot open it (sealed with a secret key that was
// lost): it could sign nothing, and would fail every delivery of the
// overlap, so the new secret signs alone at once (the endpoint has no
// PreviousSecretUntil).
func (o *Ops) RotateSecret(ctx context.Context, by audit.Actor, scope, id string) (IssuedEndpoint, error) {
	res := IssuedEndpoint{Secret: NewSecret()}
	stored, err := o.storedSecret(id, res.Secret)
	if err != nil {
		return IssuedEndpoint{}, err
	}
	res.Endpoint, err = audit.Update(ctx, o.db, by, "webhook_endpoint.rotate", EndpointAudit, o.endpoint(ctx, scope, id),
		func(tx pgx.Tx, _ Endpoint) (Endpoint, error) {
			var current string
			if err := tx.QueryRow(ctx, `SELECT secret FROM webhook_endpoints WHERE id = $1 FOR UPDATE`, id).Scan(&current); err != nil {
				return Endpoint{}, fmt.Errorf("events: webhook_endpoint.rotate: %w", err)
			}
			keep := true // without keys nothing can be judged: kept, as before keys
			if o.keys != nil {
				_, _, err := openSecret(o.keys, id, current)
				keep = err == nil
			}
			// The secret moves to previous_secret as stored: both are
			// sealed for the endpoint, whichever column holds them.
			e, err := scanEndpoint(tx.QueryRow(ctx, `UPDATE webhook_endpoints SET
				previous_secret = CASE WHEN $5 THEN secret END,
				previous_secret_until = CASE WHEN $5 THEN $3::timestamptz END, secret = $4
				WHERE id = $1 AND ($2 = '' OR owner_tenant_id::text = $2) RETURNING `+endpointColumns,
				id, scope, o.now().Add(RotationOverlap), stored, keep))
			if err != nil {
				return Endpoint{}, fmt.Errorf("events: webhook_endpoint.rotate: %w", err)
			}
			return e, nil
		})
	return res, err
}

// Disable stops deliveries to endpoint id (webhook_endpoint.disable):
// its pending deliveries wait, and it receives no new events, until
// Enable.
func (o *Ops) Disable(ctx context.Context, by audit.Actor, scope, id string) (Endpoint, error) {
	return o.update(ctx, by, scope, id, "webhook_endpoint.disable",
		`disabled_at = coalesce(disabled_at, $3), disabled_reason = CASE WHEN disabled_at IS NULL THEN 'manual' ELSE disabled_reason END`,
		o.now())
}

// Enable resumes deliveries to endpoint id (webhook_endpoint.enable):
// its pending deliveries go out when due (at once for those whose time
// passed while it was disabled), and its failing time starts again.
func (o *Ops) Enable(ctx context.Context, by audit.Actor, scope, id string) (Endpoint, error) {
	return o.update(ctx, by, scope, id, "webhook_endpoint.enable",
		`disabled_at = NULL, disabled_reason = '', failing_since = NULL`)
}

// update applies set (SQL assignments over $1 id, $2 scope, and args
// from $3 on) to endpoint id in scope, recording action.
func (o *Ops) update(ctx context.Context, by audit.Actor, scope, id, action, set string, args ...any) (Endpoint, error) {
	return audit.Update(ctx, o.db, by, action, EndpointAudit, o.endpoint(ctx, scope, id),
		func(tx pgx.Tx, _ Endpoint) (Endpoint, error) {
			e, err := scanEndpoint(tx.QueryRow(ctx, `UPDATE webhook_endpoints SET `+set+`
				WHERE id = $1 AND ($2 = '' OR owner_tenant_id::text = $2) RETURNING `+endpointColumns,
				append([]any{id, scope}, args...)...))
			if err != nil {
				return Endpoint{}, fmt.Errorf("events: %s: %w", action, err)
			}
			return e, nil
		})
}

// DeleteEndpoint removes endpoint id with its deliveries
// (webhook_endpoint.delete).
func (o *Ops) DeleteEndpoint(ctx context.Context, by audit.Actor, scope, id string) error {
	return audit.Delete(ctx, o.db, by, "webhook_endpoint.delete", EndpointAudit, o.endpoint(ctx, scope, id),
		func(tx pgx.Tx, _ Endpoint) error {
			if _, err := tx.Exec(ctx, `DELETE FROM webhook_endpoints WHERE id = $1`, id); err != nil {
				return fmt.Errorf("events: delete endpoint: %w", err)
			}
			return nil
		})
}

// endpoint reads endpoint id in scope on a change's transaction.
func (o *Ops) endpoint(ctx context.Context, scope, id string) func(pgx.Tx) (Endpoint, error) {
	return func(tx pgx.Tx) (Endpoint, error) { return NewStore(tx).Endpoint(ctx, scope, id) }
}
