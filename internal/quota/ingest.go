package quota

import (
	"context"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
)

// IngestConfig configures an Ingest. Zero values take the defaults noted.
type IngestConfig struct {
	// RateAlert says when a key's or a tenant's denials by rate rules are
	// sustained enough for ratelimit.sustained (RateAlert's defaults;
	// TOLLGATE_RATELIMIT_ALERT_DENIALS, _TENANT_ALERT_DENIALS and
	// _ALERT_WINDOW).
	RateAlert RateAlert
	// Counters, when set, is the limiter store the sweep reads the
	// tenants' monthly quota counters from (SweepCounters), under
	// KeyPrefix: the usage worker's Redis. Nil skips that step.
	Counters limiter.WindowReader
	// KeyPrefix starts the limiter state keys, as the check path's
	// (TOLLGATE_KEY_PREFIX; default "tg:").
	KeyPrefix string
}

// Ingest is quota's part in applying usage (it satisfies usage.Hook):
// in the apply transaction it records the thresholds the applied
// batches' checks crossed, the first denials by a spend cap or a hard
// quota, whatever the rollups now show crossed that no check handed on,
// and the keys rate rules keep denying, each exactly once; its sweep
// resolves and finds what no usage comes to show. Safe for concurrent
// use; give each usage store its own, as the counters' sweep resumes
// where that store's last one stopped.
type Ingest struct {
	db  *pgxpool.Pool
	cfg IngestConfig

	mu sync.Mutex
	// counterFrom is where the next Sweep goes on with the counters
	// (SweepCounters' next); guarded by mu.
	counterFrom string
}

// NewIngest returns quota's ingest on db, the database usage is applied
// to.
func NewIngest(db *pgxpool.Pool, cfg IngestConfig) *Ingest {
	if cfg.KeyPrefix == "" {
		cfg.KeyPrefix = "tg:"
	}
	cfg.RateAlert = cfg.RateAlert.WithDefaults()
	return &Ingest{db: db, cfg: cfg}
}

// counterSweepBudget bounds the time one Sweep spends reading counters:
// past it, the next sweep goes on where this one stopped, so that the
// worker applying batches is never held up long.
const counterSweepBudget = time.Second

// Applied records, in the apply transaction tx, the quota thresholds the
// batches' checks crossed, the first denials by a spend cap or a hard
// quota, and whatever the rollups now show crossed that no check handed
// on (Reconcile, for each month the batches' rows fall in: a batch of
// October applied in November, held up or caught up with, crosses
// October's thresholds), and the keys rate rules keep denying
// (RecordRateDenials): each exactly once.
func (in *Ingest) Applied(ctx context.Context, tx pgx.Tx, batches []metering.Batch, now time.Time) error {
	var crossings []Crossing
	var denials []Denial
	var limited []RateSubject
	type tenantMonth struct {
		tenantID string
		month    time.Time
	}
	seen := map[tenantMonth]bool{}
	tenantIDs := map[time.Time][]string{} // by month, each tenant once
	for _, b := range batches {
		for _, c := range b.Crossings {
			crossings = append(crossings, Crossing{TenantID: c.TenantID, Units: c.Units, AtUS: c.AtUS})
		}
		for _, r := range b.Rows {
			if r.TenantID == "" {
				continue
			}
			if k := (tenantMonth{r.TenantID, monthOf(time.Unix(r.Minute, 0))}); !seen[k] {
				seen[k] = true
				tenantIDs[k.month] = append(tenantIDs[k.month], r.TenantID)
			}
			if IsRateDenial(r.Reason, r.DeniedBy) {
				keyID := r.KeyID
				if keyID == "" {
					keyID = NoKey
				}
				limited = append(limited, RateSubject{TenantID: r.TenantID, KeyID: keyID})
			}
			switch {
			case r.Reason == tollgate.ReasonSpendCap:
				denials = append(denials, Denial{TenantID: r.TenantID, SpendCap: true, AtUS: r.Minute * 1_000_000})
			case r.Reason == tollgate.ReasonRateLimited && slices.Contains(strings.Split(r.DeniedBy, ","), plans.QuotaRuleName):
				denials = append(denials, Denial{TenantID: r.TenantID, AtUS: r.Minute * 1_000_000})
			}
		}
	}
	if err := RecordCrossings(ctx, tx, crossings); err != nil {
		return err
	}
	if err := RecordDenials(ctx, tx, denials); err != nil {
		return err
	}
	// Month by month in order, each month's tenants in ID order
	// (reconcile's), so that workers reconciling at once lock crossings
	// in one order.
	months := slices.SortedFunc(maps.Keys(tenantIDs), time.Time.Compare)
	for _, month := range months {
		if err := reconcile(ctx, tx, tenantIDs[month], nil, month, now); err != nil {
			return err
		}
	}
	return RecordRateDenials(ctx, tx, limited, in.cfg.RateAlert, now)
}

// Sweep resolves what no longer holds although no usage comes to apply,
// each in its own transaction: the rate limiting alerts whose window
// emptied (SweepRateAlerts), and the threshold crossings of months gone
// by or whose threshold moved since (SweepCrossings). Then, with Counters
// set, it records the threshold crossings the tenants' monthly quota
// counters show and no batch brought (SweepCounters): last, so that a
// limiter store that fails stops nothing else, and for at most
// counterSweepBudget, the next sweep going on with the tenants after the
// last it looked at. The usage worker calls it every half minute, busy
// or idle.
func (in *Ingest) Sweep(ctx context.Context, now time.Time) error {
	err := postgres.Tx(ctx, in.db, func(tx pgx.Tx) error {
		return SweepRateAlerts(ctx, tx, in.cfg.RateAlert, now)
	})
	if err != nil {
		return err
	}
	err = postgres.Tx(ctx, in.db, func(tx pgx.Tx) error {
		return SweepCrossings(ctx, tx, now)
	})
	if err != nil || in.cfg.Counters == nil {
		return err
	}
	in.mu.Lock()
	from := in.counterFrom
	in.mu.Unlock()
	next, err := SweepCounters(ctx, in.db, in.cfg.Counters, in.cfg.KeyPrefix, now, from, counterSweepBudget)
	in.mu.Lock()
	in.counterFrom = next
	in.mu.Unlock()
	return err
}
