package events

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
)

// wants is the SQL condition under which endpoint w receives event ev:
// its types, and its tenant — its own for a tenant's endpoint, its list
// (or every tenant, and global events, when empty) for an operator's.
const wants = `(cardinality(w.event_types) = 0 OR ev.type = ANY(w.event_types))
	AND (w.owner_tenant_id = ev.tenant_id
		OR (w.owner_tenant_id IS NULL AND (cardinality(w.tenant_ids) = 0 OR ev.tenant_id = ANY(w.tenant_ids))))`

// MaxReplay is the most events one replay sends.
const MaxReplay = 10000

// ReplayInput is the body of POST …/webhooks/endpoints/{endpointID}/replay:
// one event (EventID), or every event of the endpoint from From to To.
type ReplayInput struct {
	EventID string     `json:"event_id"`
	From    *time.Time `json:"from"`
	To      *time.Time `json:"to"`
}

func (in ReplayInput) validate() error {
	f := map[string]string{}
	switch {
	case in.EventID != "" && (in.From != nil || in.To != nil):
		f["event_id"] = "give either event_id or from and to"
	case in.EventID == "" && (in.From == nil || in.To == nil):
		f["event_id"] = "give either event_id or from and to"
	case in.EventID == "" && !in.From.Before(*in.To):
		f["to"] = "must be after from"
	}
	return tollgate.Invalid(f)
}

// Replayed is the answer to a replay: how many new deliveries it made.
type Replayed struct {
	Deliveries int `json:"deliveries"`
}

// Replay sends events to endpoint id again (webhook_endpoint.replay), as
// new deliveries with the events' own IDs (the same webhook-id): one
// event, or every event the endpoint receives from in.From up to in.To
// (at most MaxReplay, oldest first). An event the endpoint was sent
// before counts as one it receives, though its filters would not pick it
// now (a test event; types changed since). ENOTFOUND for an event the endpoint
// would not receive (another tenant's, for one); ECONFLICT for a disabled
// endpoint.
func (o *Ops) Replay(ctx context.Context, by audit.Actor, scope, id string, in ReplayInput) (Replayed, error) {
	if err := in.validate(); err != nil {
		return Replayed{}, err
	}
	var res Replayed
	err := audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		e, err := enabledEndpoint(ctx, tx, scope, id)
		if err != nil {
			return audit.Change{}, err
		}
		var from, to *time.Time
		if in.EventID == "" {
			from, to = in.From, in.To
		}
		tag, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, created_at, next_attempt_at)
			SELECT ev.id, w.id, $5, $5 FROM events ev JOIN webhook_endpoints w ON w.id = $1
			WHERE (`+wants+` OR EXISTS (SELECT 1 FROM webhook_deliveries sent WHERE sent.event_id = ev.id AND sent.endpoint_id = w.id))
			AND (ev.id = $2 OR ($2 = '' AND ev.created_at >= $3 AND ev.created_at < $4))
			ORDER BY ev.id LIMIT $6`, id, in.EventID, from, to, o.now(), MaxReplay)
		if err != nil {
			return audit.Change{}, fmt.Errorf("events: replay: %w", err)
		}
		res.Deliveries = int(tag.RowsAffected())
		if in.EventID != "" && res.Deliveries == 0 {
			return audit.Change{}, tollgate.Errorf(tollgate.ENOTFOUND, "event %s not found", in.EventID)
		}
		c := EndpointAudit("webhook_endpoint.replay", &e, nil)
		c.Before, c.After = nil, map[string]any{"event_id": in.EventID, "from": from, "to": to, "deliveries": res.Deliveries}
		return c, nil
	})
	return res, err
}

// enabledEndpoint reads endpoint id in tx for a change that sends to it:
// ECONFLICT when it is disabled.
func enabledEndpoint(ctx context.Context, tx pgx.Tx, scope, id string) (Endpoint, error) {
	e, err := NewStore(tx).Endpoint(ctx, scope, id)
	if err == nil && e.DisabledAt != nil {
		err = tollgate.Errorf(tollgate.ECONFLICT, "webhook endpoint %s is disabled: enable it first", id)
	}
	return e, err
}

// TestData is the payload of a webhook.test event.
type TestData struct {
	EndpointID string `json:"endpoint_id"`
	Message    string `json:"message"`
}

// SendTest sends endpoint id a webhook.test event, to it alone
// (webhook_endpoint.test). ECONFLICT for a disabled endpoint.
func (o *Ops) SendTest(ctx context.Context, by audit.Actor, scope, id string) (Event, error) {
	var ev Event
	err := audit.Apply(ctx, o.db, by, func(tx pgx.Tx) (audit.Change, error) {
		e, err := enabledEndpoint(ctx, tx, scope, id)
		if err != nil {
			return audit.Change{}, err
		}
		ev, err = insertEvent(ctx, tx, Event{Type: WebhookTest, TenantID: e.TenantID, CreatedAt: o.now(),
			Data: TestData{EndpointID: e.ID, Message: "A test event sent from Tollgate."}})
		if err != nil {
			return audit.Change{}, err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, created_at, next_attempt_at)
			VALUES ($1, $2, $3, $3)`, ev.ID, e.ID, ev.CreatedAt); err != nil {
			return audit.Change{}, fmt.Errorf("events: send test: %w", err)
		}
		c := EndpointAudit("webhook_endpoint.test", &e, nil)
		c.Before, c.After = nil, map[string]any{"event_id": ev.ID}
		return c, nil
	})
	return ev, err
}
