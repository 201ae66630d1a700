// Package billing turns usage into money: statements priced from a
// tenant's month of usage and plan history (statement.go, report.go),
// their projection to the month's end, CSV, and closing a month (Ops),
// which freezes its statements.
//
// It only bills: the usage it prices is package usage's, which applies
// the check servers' batches exactly once and answers the usage queries
// (usage.Reader, usage.MonthLines…); billing reads it there and writes no
// usage. The check server never links it.
//
// docs/usage.md describes the rules for rounding and proration.
package billing

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/usage"
)

// Store reads statements: priced from current usage while a month is
// open, the frozen ones once it is closed. Safe for concurrent use.
type Store struct {
	db      *pgxpool.Pool
	plans   *plans.Store
	tenants *tenants.Store
	usage   *usage.Reader
	now     func() time.Time
}

// NewStore returns a Store on db; now is the clock (nil: time.Now).
func NewStore(db *pgxpool.Pool, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, plans: plans.NewStore(db), tenants: tenants.NewStore(db),
		usage: usage.NewReader(db, usage.StoreConfig{Now: now}), now: now}
}

// Now returns the store's current time (its configured clock).
func (s *Store) Now() time.Time { return s.now() }
