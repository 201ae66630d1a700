// Package events is Tollgate's quota events: an outbox of events written
// in the transaction of the change they describe (Emit), the webhook
// endpoints that receive them (Ops, Store), and the deliverers that send
// them, signed per Standard Webhooks, at least once, with retries for
// days (Deliverer).
//
// An event is committed before anything is sent: Emit writes the event
// and one delivery per endpoint that wants it on the caller's
// transaction, and the deliverers only ever read committed deliveries.
package events

import (
	"context"
	"crypto/rand"
	"encoding/base32"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/postgres"
)

// The event types emitted today; docs/events.md lists every type of the
// product with its payload, including those not emitted yet.
const (
	KeyRevoked              = "key.revoked"
	KeyRotated              = "key.rotated"
	TenantSuspended         = "tenant.suspended"
	TenantResumed           = "tenant.resumed"
	StatementClosed         = "statement.closed"
	InvoicePaid             = "invoice.paid"
	InvoicePaymentFailed    = "invoice.payment_failed"
	InvoiceVoided           = "invoice.voided"
	WebhookEndpointDisabled = "webhook_endpoint.disabled"
	WebhookTest             = "webhook.test"
)

// Types is every event type an endpoint may subscribe to: those emitted
// today and those the check path will emit.
var Types = []string{
	KeyRevoked, KeyRotated, "key.expiring",
	TenantSuspended, TenantResumed,
	StatementClosed,
	InvoicePaid, InvoicePaymentFailed, InvoiceVoided,
	"quota.threshold.crossed", "quota.threshold.resolved", "quota.forecast.exceeded", "quota.exhausted",
	"spend_cap.reached",
	"ratelimit.sustained", "ratelimit.resolved",
	"credits.low", "credits.exhausted", "credits.expiring",
	WebhookEndpointDisabled, WebhookTest,
}

// Event is one event: the JSON document an endpoint receives.
type Event struct {
	// ID is "evt_" and 26 characters, sortable by creation time; Emit
	// makes it when empty. It is the webhook-id of every delivery.
	ID   string `json:"id"`
	Type string `json:"type"`
	// CreatedAt is when the event happened; Emit sets it (time.Now) when
	// zero.
	CreatedAt time.Time `json:"created_at"`
	// TenantID is the tenant the event is about; "" for a global event
	// (JSON null).
	TenantID string `json:"tenant_id"`
	// Data is the type's payload: anything that marshals to a JSON
	// object; json.RawMessage when read back.
	Data any `json:"data"`
}

// MarshalJSON writes tenant_id as null for a global event.
func (e Event) MarshalJSON() ([]byte, error) {
	type plain Event
	var tenant *string
	if e.TenantID != "" {
		tenant = &e.TenantID
	}
	return json.Marshal(struct {
		plain
		TenantID *string `json:"tenant_id"`
	}{plain(e), tenant})
}

// idEncoding is lower-case base32hex: IDs sort as their bytes do.
var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

// NewID returns a new event ID for an event at t: "evt_", then 48 bits
// of t in milliseconds and 80 random bits, as 26 base32 characters.
func NewID(t time.Time) string {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], uint64(t.UnixMilli())<<16)
	_, _ = rand.Read(b[6:])
	return "evt_" + idEncoding.EncodeToString(b[:])
}

// Emit writes e to the outbox on tx, the transaction of the change it
// describes, with one pending delivery for every enabled endpoint that
// wants it: an endpoint of e's tenant, or an operator's endpoint whose
// tenants include e's (a global event goes to operators' endpoints for
// every tenant only). The event is sent once tx commits; when tx rolls
// back, nothing is. It returns e with its ID and time. EINVALID for an
// event without a type or whose data is not a JSON object.
func Emit(ctx context.Context, tx postgres.Conn, e Event) (Event, error) {
	e, err := insertEvent(ctx, tx, e)
	if err != nil {
		return e, err
	}
	if _, err := tx.Exec(ctx, `INSERT INTO webhook_deliveries (event_id, endpoint_id, created_at, next_attempt_at)
		SELECT ev.id, w.id, ev.created_at, ev.created_at FROM events ev, webhook_endpoints w
		WHERE ev.id = $1 AND w.disabled_at IS NULL AND `+wants, e.ID); err != nil {
		return e, fmt.Errorf("events: emit %s: deliveries: %w", e.Type, err)
	}
	return e, nil
}

// insertEvent writes e, with its ID and time made when missing, to the
// outbox on tx, without deliveries.
func insertEvent(ctx context.Context, tx postgres.Conn, e Event) (Event, error) {
	if e.Type == "" {
		return e, tollgate.Invalid(map[string]string{"type": "is required"})
	}
	if e.CreatedAt.IsZero() {
		e.CreatedAt = time.Now()
	}
	e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Microsecond)
	if e.ID == "" {
		e.ID = NewID(e.CreatedAt)
	}
	data, err := json.Marshal(e.Data)
	if err != nil || !strings.HasPrefix(string(data), "{") {
		return e, tollgate.Invalid(map[string]string{"data": "must be a JSON object"})
	}
	e.Data = json.RawMessage(data)
	if _, err := tx.Exec(ctx, `INSERT INTO events (id, type, tenant_id, created_at, data) VALUES ($1, $2, $3, $4, $5)`,
		e.ID, e.Type, optional(e.TenantID), e.CreatedAt, data); err != nil {
		return e, fmt.Errorf("events: emit %s: %w", e.Type, err)
	}
	return e, nil
}

// optional returns nil for "" (SQL NULL), else s.
func optional(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}
