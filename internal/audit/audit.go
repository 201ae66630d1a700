// Package audit records every change made through the admin API and CLI:
// who (actor), what (action), to what (target), when, and the fields that
// changed. Entries are written in the transaction of the change they
// describe, so there is no change without its entry. They never hold a
// secret: Record refuses objects with secret-bearing field names.
package audit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Actor is who makes a change: the principal every change operation takes.
// ID and Name go into the change's entry; Operator is the one role fact
// operations decide on (only operators may extend a key's expiry, for
// example). Whether the actor may make the change at all is decided
// before the operation is called (internal/access).
type Actor struct {
	// ID is the admin user's ID; "" for the CLI.
	ID string
	// Name is the user's email, or "cli" for the operator CLI.
	Name string
	// Operator is true for operators and the CLI, false for tenant users.
	Operator bool
}

// CLI is the actor of changes made with the admin command line: an
// operator.
var CLI = Actor{Name: "cli", Operator: true}

// Change is one change to record.
type Change struct {
	// Action is "<target type>.<verb>", e.g. "key.revoke".
	Action     string
	TargetType string
	TargetID   string
	// TenantID is the tenant the target belongs to, if any.
	TenantID string
	// Before and After are the target's state (anything that marshals to a
	// JSON object); nil when it did not exist before or after.
	Before, After any
}

// Entry is a recorded change. Before and After hold only the fields that
// changed (every field on create and delete); JSON null when absent.
type Entry struct {
	ID         int64           `json:"id"`
	At         time.Time       `json:"at"`
	ActorID    string          `json:"actor_id,omitempty"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	TargetType string          `json:"target_type"`
	TargetID   string          `json:"target_id"`
	TenantID   string          `json:"tenant_id,omitempty"`
	Before     json.RawMessage `json:"before"`
	After      json.RawMessage `json:"after"`
}

// secretFields are field names that must never reach the log: Record fails
// (and with it the change) rather than write one.
var secretFields = map[string]bool{
	"secret": true, "password": true, "password_hash": true, "token": true, "hash": true,
	"private_key": true,
}

// Record writes the change by actor on db (the change's transaction).
func Record(ctx context.Context, db postgres.Conn, actor Actor, c Change) (Entry, error) {
	before, after, err := Diff(c.Before, c.After)
	if err != nil {
		return Entry{}, fmt.Errorf("audit: %s: %w", c.Action, err)
	}
	var actorID, tenantID *string
	if actor.ID != "" {
		actorID = &actor.ID
	}
	if c.TenantID != "" {
		tenantID = &c.TenantID
	}
	e := Entry{ActorID: actor.ID, Actor: actor.Name, Action: c.Action, TargetType: c.TargetType,
		TargetID: c.TargetID, TenantID: c.TenantID, Before: before, After: after}
	err = db.QueryRow(ctx, `INSERT INTO audit_log (actor_id, actor, action, target_type, target_id, tenant_id, before, after)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id, at`,
		actorID, actor.Name, c.Action, c.TargetType, c.TargetID, tenantID, nullJSON(before), nullJSON(after)).
		Scan(&e.ID, &e.At)
	if err != nil {
		return Entry{}, fmt.Errorf("audit: record %s: %w", c.Action, err)
	}
	return e, nil
}

func nullJSON(raw json.RawMessage) any {
	if raw == nil {
		return nil
	}
	return string(raw)
}

// Diff returns before and after as JSON objects keeping only the top-level
// fields whose values differ (all of them when one side is nil). It fails
// on a value that is not an object and on a secret-bearing field name.
func Diff(before, after any) (json.RawMessage, json.RawMessage, error) {
	b, err := fields(before)
	if err != nil {
		return nil, nil, err
	}
	a, err := fields(after)
	if err != nil {
		return nil, nil, err
	}
	if b != nil && a != nil {
		// A field one side omits (omitempty) is null there.
		for k := range a {
			if _, ok := b[k]; !ok {
				b[k] = json.RawMessage("null")
			}
		}
		for k := range b {
			if _, ok := a[k]; !ok {
				a[k] = json.RawMessage("null")
			}
		}
		for k, bv := range b {
			if av, ok := a[k]; ok && bytes.Equal(bv, av) {
				delete(a, k)
				delete(b, k)
			}
		}
	}
	return marshal(b), marshal(a), nil
}

func fields(v any) (map[string]json.RawMessage, error) {
	if v == nil {
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if string(raw) == "null" {
		return nil, nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("audit: %T is not a JSON object", v)
	}
	for k, fv := range m {
		if err := checkNoSecrets(k); err != nil {
			return nil, err
		}
		var compact bytes.Buffer
		if err := json.Compact(&compact, fv); err == nil {
			m[k] = compact.Bytes()
		}
	}
	return m, nil
}

// checkNoSecrets fails when a top-level field names a secret. Nested
// objects are left alone: they are callers' data (a key's metadata), which
// may use any names.
func checkNoSecrets(name string) error {
	if secretFields[strings.ToLower(name)] {
		return fmt.Errorf("audit: refusing to record secret-bearing field %q", name)
	}
	return nil
}

func marshal(m map[string]json.RawMessage) json.RawMessage {
	if m == nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, k := range keys {
		if i > 0 {
			buf.WriteByte(',')
		}
		name, _ := json.Marshal(k)
		buf.Write(name)
		buf.WriteByte(':')
		buf.Write(m[k])
	}
	buf.WriteByte('}')
	return buf.Bytes()
}

// Filter narrows an audit listing; zero fields match everything.
type Filter struct {
	// Actor matches the actor's name (email, "cli") or user ID.
	Actor string
	// Action matches exactly, or as a prefix when it ends in "*"
	// ("key.*").
	Action string
	// TargetType and TargetID match the target.
	TargetType string
	TargetID   string
	// TenantID matches the tenant the target belongs to.
	TenantID string
	// From and To bound the time: From ≤ at < To.
	From, To time.Time
}

// Store reads the audit log.
type Store struct {
	db postgres.Conn
}

// NewStore returns a Store on db.
func NewStore(db postgres.Conn) *Store { return &Store{db: db} }

// List returns one page of entries matching f, newest first.
func (s *Store) List(ctx context.Context, f Filter, pr page.Request) (page.Page[Entry], error) {
	var after struct {
		ID int64 `json:"i"`
	}
	have, err := pr.After(&after)
	if err != nil {
		return page.Page[Entry]{}, err
	}
	action, prefix := f.Action, false
	if p, ok := strings.CutSuffix(action, "*"); ok {
		action, prefix = p, true
	}
	var from, to *time.Time
	if !f.From.IsZero() {
		from = &f.From
	}
	if !f.To.IsZero() {
		to = &f.To
	}
	rows, err := s.db.Query(ctx, `SELECT id, at, coalesce(actor_id::text, ''), actor, action, target_type,
		target_id, coalesce(tenant_id::text, ''), before, after FROM audit_log
		WHERE (NOT $1 OR id < $2)
		AND ($3 = '' OR actor = $3 OR actor_id::text = $3)
		AND ($4 = '' OR (NOT $5 AND action = $4) OR ($5 AND starts_with(action, $4)))
		AND ($6 = '' OR target_type = $6)
		AND ($7 = '' OR target_id = $7)
		AND ($8 = '' OR tenant_id::text = $8)
		AND ($9::timestamptz IS NULL OR at >= $9)
		AND ($10::timestamptz IS NULL OR at < $10)
		ORDER BY id DESC LIMIT $11`,
		have, after.ID, f.Actor, action, prefix, f.TargetType, f.TargetID, strings.ToLower(f.TenantID),
		from, to, pr.Fetch())
	list, err := postgres.Collect(rows, err, func(r pgx.Row) (Entry, error) {
		var e Entry
		var before, after []byte
		err := r.Scan(&e.ID, &e.At, &e.ActorID, &e.Actor, &e.Action, &e.TargetType, &e.TargetID, &e.TenantID,
			&before, &after)
		e.Before, e.After = rawOrNull(before), rawOrNull(after)
		return e, err
	}, "audit: list")
	if err != nil {
		return page.Page[Entry]{}, err
	}
	return page.Make(pr, list, func(e Entry) any {
		after.ID = e.ID
		return after
	}), nil
}

func rawOrNull(b []byte) json.RawMessage {
	if b == nil {
		return json.RawMessage("null")
	}
	return b
}

// ValidateFilter names each invalid field of f.
func ValidateFilter(f Filter) error {
	m := map[string]string{}
	if !f.From.IsZero() && !f.To.IsZero() && !f.From.Before(f.To) {
		m["to"] = "must be after from"
	}
	return tollgate.Invalid(m)
}

// Apply makes an audited change: the one transaction helper of every
// change operation (plans.Ops, tenants.Ops, auth.Ops…). It runs fn in one
// transaction and records the change fn returns, by actor, in the same
// transaction: exactly one entry, so that no change is ever without its
// record (and no record without its change). When fn fails, nothing is
// written. fn builds its stores on tx.
func Apply(ctx context.Context, db postgres.Conn, actor Actor, fn func(tx pgx.Tx) (Change, error)) error {
	return postgres.Tx(ctx, db, func(tx pgx.Tx) error {
		c, err := fn(tx)
		if err != nil {
			return err
		}
		_, err = Record(ctx, tx, actor, c)
		return err
	})
}

// The audited change to one record of type T: Create, Update and Delete
// run it in one transaction and record describe(action, before, after),
// where before is nil for a record the change made and after nil for one
// it removed. describe is the record's own description, such as
// tenants.KeyAudit; it names the target and never a secret.

// Create makes a record with create and records its creation. It returns
// the record made.
func Create[T any](ctx context.Context, db postgres.Conn, actor Actor, action string,
	describe func(action string, before, after *T) Change, create func(tx pgx.Tx) (T, error)) (T, error) {
	var made T
	err := one(ctx, db, actor, action, describe, func(tx pgx.Tx) (*T, *T, error) {
		var err error
		made, err = create(tx)
		return nil, &made, err
	})
	return made, err
}

// Update reads a record with get, changes it with set (which returns it as
// it now is) and records the change. It returns the record after the
// change; get's error (ENOTFOUND) ends it before set runs.
func Update[T any](ctx context.Context, db postgres.Conn, actor Actor, action string,
	describe func(action string, before, after *T) Change,
	get func(tx pgx.Tx) (T, error), set func(tx pgx.Tx, before T) (T, error)) (T, error) {
	var after T
	err := one(ctx, db, actor, action, describe, func(tx pgx.Tx) (*T, *T, error) {
		before, err := get(tx)
		if err != nil {
			return nil, nil, err
		}
		after, err = set(tx, before)
		return &before, &after, err
	})
	return after, err
}

// Delete reads a record with get, removes it with remove and records the
// removal.
func Delete[T any](ctx context.Context, db postgres.Conn, actor Actor, action string,
	describe func(action string, before, after *T) Change,
	get func(tx pgx.Tx) (T, error), remove func(tx pgx.Tx, before T) error) error {
	return one(ctx, db, actor, action, describe, func(tx pgx.Tx) (*T, *T, error) {
		before, err := get(tx)
		if err != nil {
			return nil, nil, err
		}
		return &before, nil, remove(tx, before)
	})
}

// one applies change and records describe of the before and after it
// returns, unless it fails.
func one[T any](ctx context.Context, db postgres.Conn, actor Actor, action string,
	describe func(action string, before, after *T) Change, change func(tx pgx.Tx) (before, after *T, err error)) error {
	return Apply(ctx, db, actor, func(tx pgx.Tx) (Change, error) {
		before, after, err := change(tx)
		if err != nil {
			return Change{}, err
		}
		return describe(action, before, after), nil
	})
}

// Subject returns the record a change is about: after, or before when the
// change removed it.
func Subject[T any](before, after *T) *T {
	if after != nil {
		return after
	}
	return before
}
