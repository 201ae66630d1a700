package events

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Endpoint is a webhook endpoint as the API shows it; its secret is
// shown once, when made or rotated (IssuedEndpoint), and never stored in
// an audit entry.
type Endpoint struct {
	ID string `json:"id"`
	// TenantID is the tenant whose admins made the endpoint: it receives
	// that tenant's events only. "" (null) for an operator's endpoint.
	TenantID    string `json:"tenant_id"`
	URL         string `json:"url"`
	Description string `json:"description"`
	// EventTypes are the types it receives; empty: every type.
	EventTypes []string `json:"event_types"`
	// TenantIDs are the tenants whose events an operator's endpoint
	// receives; empty: every tenant's, and global events.
	TenantIDs []string `json:"tenant_ids"`
	// DisabledAt is when it was disabled (null while enabled);
	// DisabledReason is "manual" or "failing" (failed every attempt for
	// DisableAfter).
	DisabledAt     *time.Time `json:"disabled_at"`
	DisabledReason string     `json:"disabled_reason,omitempty"`
	// FailingSince is when its attempts began failing; null while the
	// latest succeeded.
	FailingSince *time.Time `json:"failing_since"`
	// DisablesAt is when an enabled endpoint that is failing will be
	// disabled if no attempt succeeds before (FailingSince +
	// DisableAfter); null otherwise. With DisabledReason "failing" it is
	// what the console's notices show (Store.Troubled).
	DisablesAt *time.Time `json:"disables_at"`
	// PreviousSecretUntil is when the secret before the latest rotation
	// stops signing; null when there is none.
	PreviousSecretUntil *time.Time `json:"previous_secret_until"`
	CreatedAt           time.Time  `json:"created_at"`
}

// MarshalJSON writes tenant_id as null for an operator's endpoint.
func (e Endpoint) MarshalJSON() ([]byte, error) {
	type plain Endpoint
	return json.Marshal(struct {
		plain
		TenantID *string `json:"tenant_id"`
	}{plain(e), optional(e.TenantID)})
}

// EndpointAudit describes a change to an endpoint for the audit log.
func EndpointAudit(action string, before, after *Endpoint) audit.Change {
	e := audit.Subject(before, after)
	c := audit.Change{Action: action, TargetType: "webhook_endpoint", TargetID: e.ID, TenantID: e.TenantID}
	if before != nil {
		c.Before = before
	}
	if after != nil {
		c.After = after
	}
	return c
}

// Delivery is one event sent to one endpoint, with its attempts.
type Delivery struct {
	ID         int64  `json:"id"`
	EventID    string `json:"event_id"`
	EventType  string `json:"event_type"`
	EndpointID string `json:"endpoint_id"`
	// State is "pending" (attempts to come), "delivered" or "failed"
	// (every attempt of the schedule failed).
	State         string     `json:"state"`
	Attempts      []Attempt  `json:"attempts"`
	CreatedAt     time.Time  `json:"created_at"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	FinishedAt    *time.Time `json:"finished_at"`
}

// Attempt is one try at a delivery.
type Attempt struct {
	N  int       `json:"attempt"`
	At time.Time `json:"at"`
	// Status is the response's HTTP status; null when none came (Error
	// says why).
	Status    *int  `json:"status"`
	LatencyUS int64 `json:"latency_us"`
	// ResponseBody is the first KiB of the response's body.
	ResponseBody string `json:"response_body"`
	Error        string `json:"error,omitempty"`
}

// Store reads events, endpoints and deliveries. Scope, in every method,
// is "" for an operator (everything) or a tenant's ID: that tenant's
// endpoints and events only — another tenant's are ENOTFOUND.
type Store struct {
	db   postgres.Conn
	keys *auth.SecretKeys
}

// WithSecretKeys returns the store sealing the secrets of the endpoints
// it makes (EnsureEndpoint) with keys.
func (s *Store) WithSecretKeys(keys *auth.SecretKeys) *Store {
	c := *s
	c.keys = keys
	return &c
}

// NewStore returns a Store on db.
func NewStore(db postgres.Conn) *Store { return &Store{db: db} }

const endpointColumns = `id::text, coalesce(owner_tenant_id::text, ''), url, description, event_types,
	tenant_ids::text[], disabled_at, disabled_reason, failing_since, previous_secret_until, created_at`

func scanEndpoint(r pgx.Row) (Endpoint, error) {
	var e Endpoint
	err := r.Scan(&e.ID, &e.TenantID, &e.URL, &e.Description, &e.EventTypes, &e.TenantIDs, &e.DisabledAt,
		&e.DisabledReason, &e.FailingSince, &e.PreviousSecretUntil, &e.CreatedAt)
	if e.DisabledAt == nil && e.FailingSince != nil {
		at := e.FailingSince.Add(DisableAfter)
		e.DisablesAt = &at
	}
	return e, err
}

// troubledLimit bounds Troubled's list.
const troubledLimit = 100

// Troubled returns the endpoints in scope that need a notice: those
// disabled for failing (DisabledReason "failing"), newest first, then
// those enabled and failing (DisablesAt set), soonest to be disabled
// first; at most 100. The console shows them above its webhook pages.
func (s *Store) Troubled(ctx context.Context, scope string) ([]Endpoint, error) {
	rows, err := s.db.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE ($1 = '' OR owner_tenant_id::text = $1)
			AND (disabled_reason = 'failing' AND disabled_at IS NOT NULL OR disabled_at IS NULL AND failing_since IS NOT NULL)
		ORDER BY disabled_at DESC NULLS LAST, failing_since, id LIMIT $2`, scope, troubledLimit)
	if err != nil {
		return nil, fmt.Errorf("events: troubled endpoints: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Endpoint, error) { return scanEndpoint(r) })
	if err != nil {
		return nil, fmt.Errorf("events: troubled endpoints: %w", err)
	}
	return list, nil
}

// errEndpointNotFound answers an endpoint that does not exist, or is not
// in the scope.
func errEndpointNotFound(id string) error {
	return tollgate.Errorf(tollgate.ENOTFOUND, "webhook endpoint %s not found", id)
}

// Endpoint returns endpoint id in scope; ENOTFOUND otherwise.
func (s *Store) Endpoint(ctx context.Context, scope, id string) (Endpoint, error) {
	if !tollgate.IsUUID(id) {
		return Endpoint{}, errEndpointNotFound(id)
	}
	e, err := scanEndpoint(s.db.QueryRow(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE id = $1 AND ($2 = '' OR owner_tenant_id::text = $2)`, id, scope))
	if err == pgx.ErrNoRows {
		return Endpoint{}, errEndpointNotFound(id)
	}
	if err != nil {
		return Endpoint{}, fmt.Errorf("events: get endpoint: %w", err)
	}
	return e, nil
}

// Endpoints returns one page of the endpoints in scope, newest first. For
// a tenant's scope that is the endpoints its admins made.
func (s *Store) Endpoints(ctx context.Context, scope string, pr page.Request) (page.Page[Endpoint], error) {
	var after postgres.NewestFirst
	have, err := after.After(pr)
	if err != nil {
		return page.Page[Endpoint]{}, err
	}
	rows, err := s.db.Query(ctx, `SELECT `+endpointColumns+` FROM webhook_endpoints
		WHERE ($1 = '' OR owner_tenant_id::text = $1) AND (NOT $2 OR (created_at, id::text) < ($3, $4))
		ORDER BY created_at DESC, id::text DESC LIMIT $5`, scope, have, after.CreatedAt, after.ID, pr.Fetch())
	return postgres.CollectPage(pr, rows, err, scanEndpoint, "events: list endpoints", func(e Endpoint) any {
		return postgres.NewestFirst{CreatedAt: e.CreatedAt, ID: e.ID}
	})
}

// Events returns one page of the events in scope, newest first; typ, when
// not "", keeps that type only.
func (s *Store) Events(ctx context.Context, scope, typ string, pr page.Request) (page.Page[Event], error) {
	var after struct {
		ID string `json:"i"`
	}
	have, err := pr.After(&after)
	if err != nil {
		return page.Page[Event]{}, err
	}
	rows, err := s.db.Query(ctx, `SELECT id, type, coalesce(tenant_id::text, ''), created_at, data FROM events
		WHERE ($1 = '' OR tenant_id::text = $1) AND ($2 = '' OR type = $2) AND (NOT $3 OR id < $4)
		ORDER BY id DESC LIMIT $5`, scope, typ, have, after.ID, pr.Fetch())
	return postgres.CollectPage(pr, rows, err, func(r pgx.Row) (Event, error) {
		var e Event
		var data []byte
		err := r.Scan(&e.ID, &e.Type, &e.TenantID, &e.CreatedAt, &data)
		e.Data = json.RawMessage(data)
		return e, err
	}, "events: list", func(e Event) any {
		after.ID = e.ID
		return after
	})
}

// Deliveries returns one page of endpoint endpointID's deliveries (it
// must be in scope), newest first, each with its attempts.
func (s *Store) Deliveries(ctx context.Context, scope, endpointID string, pr page.Request) (page.Page[Delivery], error) {
	if _, err := s.Endpoint(ctx, scope, endpointID); err != nil {
		return page.Page[Delivery]{}, err
	}
	var after struct {
		ID int64 `json:"i"`
	}
	have, err := pr.After(&after)
	if err != nil {
		return page.Page[Delivery]{}, err
	}
	rows, err := s.db.Query(ctx, `SELECT d.id, d.event_id, ev.type, d.endpoint_id::text, d.state, d.created_at,
		CASE WHEN d.state = 'pending' THEN d.next_attempt_at END, d.finished_at,
		coalesce((SELECT json_agg(json_build_object('attempt', a.attempt, 'at', a.at, 'status', a.status,
			'latency_us', a.latency_us, 'response_body', a.response_body, 'error', a.error) ORDER BY a.attempt)
			FROM webhook_attempts a WHERE a.delivery_id = d.id), '[]')
		FROM webhook_deliveries d JOIN events ev ON ev.id = d.event_id
		WHERE d.endpoint_id = $1 AND (NOT $2 OR d.id < $3) ORDER BY d.id DESC LIMIT $4`,
		endpointID, have, after.ID, pr.Fetch())
	return postgres.CollectPage(pr, rows, err, func(r pgx.Row) (Delivery, error) {
		var d Delivery
		var attempts []byte
		if err := r.Scan(&d.ID, &d.EventID, &d.EventType, &d.EndpointID, &d.State, &d.CreatedAt, &d.NextAttemptAt,
			&d.FinishedAt, &attempts); err != nil {
			return d, err
		}
		return d, json.Unmarshal(attempts, &d.Attempts)
	}, "events: list deliveries", func(d Delivery) any {
		after.ID = d.ID
		return after
	})
}

// EnsureEndpoint makes an endpoint to url for owner ("" an operator's),
// receiving every event, unless owner has one to url already: the demo
// seed's, which is idempotent.
func (s *Store) EnsureEndpoint(ctx context.Context, owner, url, description string, now time.Time) error {
	var id string
	if err := s.db.QueryRow(ctx, `SELECT gen_random_uuid()::text`).Scan(&id); err != nil {
		return fmt.Errorf("events: ensure endpoint %s: %w", url, err)
	}
	secret := NewSecret()
	if s.keys != nil {
		var err error
		if secret, err = sealSecret(s.keys, id, secret); err != nil {
			return err
		}
	}
	_, err := s.db.Exec(ctx, `INSERT INTO webhook_endpoints (id, owner_tenant_id, url, description, secret, created_at)
		SELECT $6::uuid, $1, $2, $3, $4, $5 WHERE NOT EXISTS (
			SELECT 1 FROM webhook_endpoints WHERE owner_tenant_id IS NOT DISTINCT FROM $1::uuid AND url = $2)`,
		optional(owner), url, description, secret, now, id)
	if err != nil {
		return fmt.Errorf("events: ensure endpoint %s: %w", url, err)
	}
	return nil
}

// DisableEndpointsAt disables (reason "manual") every enabled endpoint
// whose URL starts with prefix, and returns how many it disabled: the
// demo seed's, for the endpoints an earlier seed pointed at a public
// name. Like EnsureEndpoint it writes no audit entry of its own (the
// seed's is the change).
func (s *Store) DisableEndpointsAt(ctx context.Context, prefix string, now time.Time) (int, error) {
	tag, err := s.db.Exec(ctx, `UPDATE webhook_endpoints SET disabled_at = $2, disabled_reason = 'manual'
		WHERE disabled_at IS NULL AND starts_with(url, $1)`, prefix, now)
	if err != nil {
		return 0, fmt.Errorf("events: disable endpoints at %s: %w", prefix, err)
	}
	return int(tag.RowsAffected()), nil
}
