// Package billing is the admin side of usage: it reads the usage tables
// and turns them into money. It holds the usage worker, which takes the
// check servers' batches from the Redis stream (RedisConsumer) and applies
// each exactly once through pgstore; the usage queries behind the admin
// API and console (series, top keys and resources, rejections, totals, the
// overview); statements priced from a tenant's month of rollups and plan
// history, their projection to the month's end, CSV and reports; and
// closing a month, which freezes its statements.
//
// The check server never links it: counting decisions is package
// metering's, and writing them to Postgres package pgstore's.
//
// docs/usage.md describes the guarantees and the rules for rounding and
// proration.
package billing

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/metering/pgstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
)

// nilUUID stands for "no tenant" and "no key" in the usage tables.
const nilUUID = pgstore.NilUUID

// closeLock is held exclusively while a month closes; applying a batch
// holds it shared (pgstore.CloseLock).
const closeLock = pgstore.CloseLock

// Store reads usage from Postgres, prices statements and closes months;
// pgstore.Store writes the usage it reads. Safe for concurrent use.
type Store struct {
	db      *pgxpool.Pool
	plans   *plans.Store
	tenants *tenants.Store
	cfg     pgstore.StoreConfig
}

// NewStore returns a Store on db. cfg is the writers' configuration: its
// MinuteRetention says which minute ranges can still be read, its Now is
// the clock (BatchIDRetention is not used here).
func NewStore(db *pgxpool.Pool, cfg pgstore.StoreConfig) *Store {
	return &Store{db: db, plans: plans.NewStore(db), tenants: tenants.NewStore(db), cfg: cfg.WithDefaults()}
}

// Now returns the store's current time (its configured clock).
func (s *Store) Now() time.Time { return s.cfg.Now() }

// monthOf returns the first instant of t's UTC month.
func monthOf(t time.Time) time.Time { return pgstore.MonthStart(t) }

// minuteCutoff is the start of the oldest month whose minute rows are
// kept.
func (s *Store) minuteCutoff() time.Time { return s.cfg.MinuteCutoff() }
