// Package usage is the ingest stage of usage: it takes the batches the
// check servers publish (package metering) and lands them in Postgres,
// and it answers every question about what was used.
//
// The worker (Worker) reads the Redis stream in a consumer group
// (RedisConsumer) and applies what one fetch returned in one transaction
// through Store, exactly once per batch ID: minute rows and their hour,
// day and month rollups, the all-tenant totals, anonymous callers by IP,
// a tenant's resources beyond its monthly cap folded into (other), late
// usage of closed months, and batches Postgres refuses set aside. Store
// also keeps the monthly minute partitions and, in single-process mode,
// is the api's producer (StoreProducer). Features act on usage as it is
// applied through a Hook the programs wire (quota.Ingest), so the apply
// path names no feature. Reader is the read side: series, top keys,
// resources and addresses, rejections, totals, the overview, late usage;
// billing prices statements from it.
//
// Package metering, the check server's side, stays apart: the check
// server links no Postgres code for counting, and nothing here is on its
// hot path. Package usage imports no billing: money is billing's, which
// reads usage here.
//
// docs/usage.md describes the guarantees.
package usage

import (
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
)

// nilUUID stands for "no tenant" and "no key" in the usage tables.
const nilUUID = NilUUID

// Reader reads usage from Postgres: the queries behind the admin API, the
// console and statements. Store writes what it reads. Safe for concurrent
// use.
type Reader struct {
	db  *pgxpool.Pool
	cfg StoreConfig
}

// NewReader returns a Reader on db. cfg is the writers' configuration:
// its MinuteRetention says which minute ranges can still be read, its Now
// is the clock (the rest is not used here).
func NewReader(db *pgxpool.Pool, cfg StoreConfig) *Reader {
	return &Reader{db: db, cfg: cfg.WithDefaults()}
}

// Now returns the reader's current time (its configured clock).
func (s *Reader) Now() time.Time { return s.cfg.Now() }

// minuteCutoff is the start of the oldest month whose minute rows are
// kept.
func (s *Reader) minuteCutoff() time.Time { return s.cfg.MinuteCutoff() }

// Month is a calendar month in UTC.
type Month struct {
	start time.Time
}

// MaxEnd is the latest end a month or a range of usage may have: the
// start of 9999-12. Answers write their bounds in RFC 3339, which ends
// with year 9999 (tollgate.MaxTime), and a range is widened to whole
// buckets of up to a month: one ending later could widen to 10000-01-01.
var MaxEnd = time.Date(9999, time.December, 1, 0, 0, 0, 0, time.UTC)

// ParseMonth parses "2006-01": EINVALID naming month for anything else,
// and for a month ending after MaxEnd (9999-12).
func ParseMonth(s string) (Month, error) {
	t, err := time.Parse("2006-01", s)
	if err != nil {
		return Month{}, tollgate.Invalid(map[string]string{"month": "must be a month such as 2026-10"})
	}
	m := Month{t.UTC()}
	if m.End().After(MaxEnd) {
		return Month{}, tollgate.Invalid(map[string]string{"month": "must be 9999-11 or earlier"})
	}
	return m, nil
}

// MonthOf returns the UTC month t falls in.
func MonthOf(t time.Time) Month { return Month{MonthStart(t)} }

// Start is the month's first instant.
func (m Month) Start() time.Time { return m.start }

// End is the next month's first instant (the month is [Start, End)).
func (m Month) End() time.Time { return m.start.AddDate(0, 1, 0) }

func (m Month) String() string { return m.start.Format("2006-01") }
