package usage

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/postgres"
)

// Worker moves batches from a Consumer into the Store: apply what one
// fetch returned in one transaction (exactly once per batch, see
// Store.ApplyAll), then acknowledge. It also runs the store's
// maintenance (partitions, retention) at start and every
// MaintenanceInterval. Several workers may run at once, in one process or
// many.
type Worker struct {
	Consumer Consumer
	Store    *Store
	Log      *slog.Logger
	// FetchCount is the most batches fetched, and applied in one
	// transaction, at once (default 64).
	FetchCount int
	// MaintenanceInterval (default 1h).
	MaintenanceInterval time.Duration
	// SweepInterval is how often the Store's sweep runs (default 30s;
	// Store.Sweep, the hooks' sweeps): what the hooks record with each
	// applied batch is also checked while no usage comes, so that, for
	// quota, a key whose callers stopped altogether is resolved too and
	// the crossings the tenants' monthly quota counters show are
	// recorded.
	SweepInterval time.Duration
	// RetryMax bounds the wait between retries while Postgres or Redis
	// fail (default 5s; retries start at 50ms and double, with jitter).
	// An outage is logged when it starts, every 10s while it lasts and
	// when it ends, not at every retry.
	RetryMax time.Duration
	// AfterApply, when set, runs for each message after its transaction
	// committed and before it is acknowledged; an error stops Run with
	// that error, acknowledging nothing of that fetch. Tests use it to
	// simulate a crash between the commit and the XACK.
	AfterApply func(m Message) error

	applied, duplicates, late, setAside, failures atomic.Int64
	// partlySetAside counts the batches applied without parts that were
	// set aside (Message.Refused).
	partlySetAside atomic.Int64
	// journals counts the applied batches that were usage journals.
	journals atomic.Int64

	monitorsOnce sync.Once
	// stream follows Redis (fetch, ack), store Postgres (apply).
	stream, store *backoff.Monitor
}

// monitors returns the worker's outage monitors, made on first use.
func (w *Worker) monitors() (stream, store *backoff.Monitor) {
	w.monitorsOnce.Do(func() {
		w.stream = backoff.NewMonitor(backoff.MonitorConfig{Component: "usage_worker", Dependency: "redis", Log: w.Log})
		w.store = backoff.NewMonitor(backoff.MonitorConfig{Component: "usage_worker", Dependency: "postgres", Log: w.Log})
	})
	return w.stream, w.store
}

// faultAfterApply, when set, is the AfterApply of workers that have none.
// Only binaries built with the "faults" tag set it (faulthook.go): the
// fault suite (test/faults) stops a worker there to kill it between a
// commit and its acknowledgement.
var faultAfterApply func(m Message) error

// WorkerStats are a worker's counters since it started.
type WorkerStats struct {
	// Applied batches; Duplicates were applied before and skipped;
	// SetAside were set aside whole (not a batch, or refused by
	// Postgres); PartlySetAside of the applied batches had parts set
	// aside (rows validation refused); LateRows fell in closed months;
	// Journals of the applied batches were usage journals.
	Applied, Duplicates, SetAside, PartlySetAside, LateRows, Errors, Journals int64
}

// Stats returns the worker's counters.
func (w *Worker) Stats() WorkerStats {
	return WorkerStats{Applied: w.applied.Load(), Duplicates: w.duplicates.Load(), SetAside: w.setAside.Load(),
		PartlySetAside: w.partlySetAside.Load(), LateRows: w.late.Load(), Errors: w.failures.Load(), Journals: w.journals.Load()}
}

// Register adds the worker's metrics to reg, with the dependency metrics
// of its view of Redis and Postgres (see backoff.Collectors).
func (w *Worker) Register(reg prometheus.Registerer) {
	stream, store := w.monitors()
	reg.MustRegister(stream.Collectors()...)
	reg.MustRegister(store.Collectors()...)
	c := func(name, help string, v *atomic.Int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help},
			func() float64 { return float64(v.Load()) })
	}
	reg.MustRegister(
		c("tollgate_usage_batches_applied_total", "Usage batches applied to Postgres.", &w.applied),
		c("tollgate_usage_batches_duplicate_total", "Usage batches delivered again after being applied (skipped).", &w.duplicates),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tollgate_usage_batches_set_aside_total",
			Help: "Usage batches (stream entries and journal claims) set aside whole, or applied without parts that were set aside: usage that was not counted (see usage_bad_batches, admin usage set-aside)."},
			func() float64 { return float64(w.setAside.Load() + w.partlySetAside.Load()) }),
		c("tollgate_usage_late_rows_total", "Usage rows that arrived after their month was closed (see usage_late).", &w.late),
		c("tollgate_usage_worker_errors_total", "Failed attempts to fetch, apply or acknowledge (retried).", &w.failures),
		c("tollgate_usage_journals_applied_total", "Usage journals (the checks' usage the limiter store recorded) applied to Postgres (of tollgate_usage_batches_applied_total).", &w.journals),
	)
	if c, ok := w.Consumer.(Consumers); ok {
		journals := c.Journal
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "tollgate_usage_journal_backlog_tags",
			Help: "Hash tags whose usage journal holds checks' usage not yet applied (read from Redis at each scrape; -1 when it does not answer). It should fall to 0 within seconds of the checks stopping: a journal that stays is not being drained (a worker under another TOLLGATE_KEY_PREFIX than the api processes', or none).",
		}, func() float64 {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			n, err := journals.Backlog(ctx)
			if err != nil {
				return -1
			}
			return float64(n)
		}))
	}
	if l, ok := w.Consumer.(lagger); ok {
		reg.MustRegister(lagCollector{consumer: l,
			batches: prometheus.NewDesc("tollgate_usage_backlog_batches",
				"Usage batches published and not yet applied (read from the stream at each scrape).", nil, nil),
			age: prometheus.NewDesc("tollgate_usage_backlog_age_seconds",
				"How long the oldest usage batch not yet applied has waited; 0 when the worker has caught up.", nil, nil),
		})
	}
}

// lagger is a Consumer that can tell how far behind it is (RedisConsumer).
type lagger interface {
	Lag(ctx context.Context) (Lag, error)
}

// lagCollector reports the consumer's lag at each scrape. While the
// stream cannot be read it reports nothing, and an alert on the metric's
// absence fires.
type lagCollector struct {
	consumer     lagger
	batches, age *prometheus.Desc
}

func (l lagCollector) Describe(ch chan<- *prometheus.Desc) { ch <- l.batches; ch <- l.age }

func (l lagCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	lag, err := l.consumer.Lag(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(l.batches, prometheus.GaugeValue, float64(lag.Batches))
	ch <- prometheus.MustNewConstMetric(l.age, prometheus.GaugeValue, lag.OldestAge.Seconds())
}

// Run consumes until ctx ends (returning nil) or AfterApply fails
// (returning its error). Postgres and Redis failures are retried: while
// Postgres is down, batches stay unacknowledged in the stream and are
// applied, exactly once, when it is back.
func (w *Worker) Run(ctx context.Context) error {
	log := w.logger()
	count := w.FetchCount
	if count <= 0 {
		count = 64
	}
	every := w.MaintenanceInterval
	if every <= 0 {
		every = time.Hour
	}
	var nextMaintenance, nextSweep time.Time
	sweepEvery := w.SweepInterval
	if sweepEvery <= 0 {
		sweepEvery = 30 * time.Second
	}
	retryMax := w.RetryMax
	if retryMax <= 0 {
		retryMax = 5 * time.Second
	}
	retry := backoff.New(backoff.Policy{Initial: 50 * time.Millisecond, Max: retryMax})
	stream, store := w.monitors()
	afterApply := w.AfterApply
	if afterApply == nil {
		afterApply = faultAfterApply
	}
	for ctx.Err() == nil {
		if now := time.Now(); !now.Before(nextMaintenance) {
			if res, err := w.Store.Maintain(ctx); err != nil {
				log.Warn("usage: maintenance failed; retrying later", "err", err)
				nextMaintenance = now.Add(time.Minute)
			} else {
				if len(res.Dropped) > 0 || res.PurgedBatches > 0 || res.PurgedSettlements > 0 {
					log.Info("usage: maintenance", "dropped_partitions", res.Dropped, "forgotten_batch_ids", res.PurgedBatches,
						"forgotten_settlements", res.PurgedSettlements)
				}
				nextMaintenance = now.Add(every)
			}
		}
		if now := time.Now(); !now.Before(nextSweep) {
			if err := w.Store.Sweep(ctx); err != nil && ctx.Err() == nil {
				log.Warn("usage: sweep failed; retrying later", "err", err)
			}
			nextSweep = now.Add(sweepEvery)
		}
		msgs, err := w.Consumer.Fetch(ctx, count)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			w.failures.Add(1)
			stream.Failure(fmt.Errorf("usage: fetch: %w", err))
			retry.Wait(ctx) //nolint:errcheck // the loop checks ctx
			continue
		}
		if len(msgs) == 0 {
			stream.Success()
		}
		f := newFetched(msgs)
		for len(msgs) > 0 {
			err := w.process(ctx, f, afterApply)
			if err == nil {
				stream.Success()
				store.Success()
				retry.Reset()
				break
			}
			if stop, ok := err.(stopError); ok {
				return stop.err
			}
			if ctx.Err() != nil {
				return nil
			}
			w.failures.Add(1)
			if ack, ok := err.(ackError); ok {
				stream.Failure(ack.err)
			} else {
				store.Failure(fmt.Errorf("usage: %d entries from %s not applied: %w", len(msgs), msgs[0].ID, err))
			}
			retry.Wait(ctx) //nolint:errcheck // the loop checks ctx
		}
	}
	return nil
}

// ackError is a failed acknowledgement: Redis's failure, not Postgres's.
type ackError struct{ err error }

func (e ackError) Error() string { return e.err.Error() }

// stopError carries AfterApply's error out of Run.
type stopError struct{ err error }

func (e stopError) Error() string { return e.err.Error() }

// fetched is one fetch's messages as the worker takes them through, and
// what became of each so far: a fetch tried again after a failure part
// way (Postgres lost while applyEach applied its batches one by one, an
// acknowledgement that failed) does again only what is left, and each
// message is counted (metrics, logs, AfterApply) once, as what became of
// it.
type fetched struct {
	msgs []Message
	// done marks the messages applied or found applied before (results
	// holds what Store.ApplyAll said of them) and those set aside whole
	// (Message.Err).
	done    []bool
	results []ApplyResult
	// counted is set once every message is done and counted: only the
	// acknowledgement is left to do.
	counted bool
}

func newFetched(msgs []Message) *fetched {
	return &fetched{msgs: msgs, done: make([]bool, len(msgs)), results: make([]ApplyResult, len(msgs))}
}

// process applies the fetched messages not yet done in one transaction,
// counts each message, then acknowledges them all. On error the caller
// calls it again with f: what was applied or set aside before the error
// is not again, and once everything is counted only the acknowledgement
// is retried. A message that is not a batch is set aside whole; the
// parts of a batch that can never be applied (Message.Refused) are set
// aside alone, under the entry's ID and refusedSuffix, in the transaction
// that applies the rest: only when the batch is applied, so once per
// batch however many entries hold it. A batch Postgres refuses is set
// aside whole, its refused parts with it, and has no record of its parts.
func (w *Worker) process(ctx context.Context, f *fetched, afterApply func(Message) error) error {
	if !f.counted {
		if err := w.apply(ctx, f); err != nil {
			return err
		}
		f.counted = true
		w.count(f)
		if afterApply != nil {
			for _, m := range f.msgs {
				if err := afterApply(m); err != nil {
					return stopError{fmt.Errorf("usage: worker stopped after applying %s: %w", m.ID, err)}
				}
			}
		}
	}
	ids := make([]string, len(f.msgs))
	for i, m := range f.msgs {
		ids[i] = m.ID
	}
	// If the ack fails the caller acknowledges again; should the worker
	// stop first, the entries are delivered again later and skipped as
	// duplicates.
	if err := w.Consumer.Ack(ctx, ids...); err != nil {
		return ackError{fmt.Errorf("usage: ack: %w", err)}
	}
	return nil
}

// apply sets aside and applies the messages of f not yet done, marking
// each done as it is; on error, those done before it stay so.
func (w *Worker) apply(ctx context.Context, f *fetched) error {
	var batches []metering.Batch
	var from []int // the index in f.msgs of each of batches
	// parts holds, for each of batches, what of it is set aside with its
	// apply; nil while no batch has any.
	var parts []refusedParts
	for i := range f.msgs {
		m := &f.msgs[i]
		if f.done[i] {
			continue
		}
		if m.Err != nil {
			if err := w.Store.SetAside(ctx, m.ID, []byte(m.Payload), m.Err); err != nil {
				return err
			}
			f.done[i] = true
			continue
		}
		if m.Refused.Parts > 0 {
			if parts == nil {
				parts = make([]refusedParts, len(batches), len(f.msgs))
			}
			parts = append(parts, refusedParts{entryID: m.ID + refusedSuffix, refused: m.Refused})
		} else if parts != nil {
			parts = append(parts, refusedParts{})
		}
		batches, from = append(batches, m.Batch), append(from, i)
	}
	results, err := w.Store.applyAll(ctx, batches, parts)
	if postgres.IsDataException(err) {
		// Postgres refuses the data of some batch: apply the batches one
		// at a time and set aside the refused ones, so that one bad batch
		// cannot stop everyone's usage.
		return w.applyEach(ctx, f, batches, from)
	}
	if err != nil {
		return err
	}
	for j, res := range results {
		f.results[from[j]], f.done[from[j]] = res, true
	}
	return nil
}

// count adds each message of f, all done, to the worker's counters, as
// applied, a duplicate or set aside whole, and logs what was set aside.
func (w *Worker) count(f *fetched) {
	log := w.logger()
	for i := range f.msgs {
		m, res := &f.msgs[i], f.results[i]
		switch {
		case m.Err != nil:
			w.setAside.Add(1)
			id, rows := m.Refused.BatchID, m.Refused.Parts
			if m.Batch.ID != "" { // refused by Postgres: set aside with its refused parts
				id, rows = m.Batch.ID, m.Batch.Parts()+m.Refused.Parts
			}
			log.Error("usage: batch set aside; none of it applied", "entry", m.ID, "batch", id, "rows", rows, "reason", m.Err)
		case res.Duplicate:
			w.duplicates.Add(1)
		default:
			w.applied.Add(1)
			w.late.Add(int64(res.LateRows))
			if strings.HasPrefix(m.ID, journalIDPrefix) {
				w.journals.Add(1)
			}
			if m.Refused.Parts > 0 {
				w.partlySetAside.Add(1)
				log.Error("usage: parts of a batch set aside; the rest applied", "entry", m.ID, "set_aside_as", m.ID+refusedSuffix,
					"batch", m.Batch.ID, "rows", m.Refused.Parts, "applied_rows", m.Batch.Parts(), "reason", m.Refused.Err())
			}
		}
	}
}

// refusedSuffix follows a message's ID in usage_bad_batches when only
// parts of its batch were set aside (Message.Refused).
const refusedSuffix = "/refused"

// applyEach applies batches (of f's messages, at the indexes from) one
// by one, each in its own transaction with its refused parts, marking
// each message done as its transaction commits: a message whose data
// Postgres refuses is set aside whole (and marked with Err), its payload
// the entry as delivered, the refused parts included, which then have
// no record of their own; one applied keeps its result. On any other
// error it stops; the messages done before stay done, so that a retry
// neither applies nor counts them again.
func (w *Worker) applyEach(ctx context.Context, f *fetched, batches []metering.Batch, from []int) error {
	for j, b := range batches {
		i := from[j]
		m := &f.msgs[i]
		var parts []refusedParts
		if m.Refused.Parts > 0 {
			parts = []refusedParts{{entryID: m.ID + refusedSuffix, refused: m.Refused}}
		}
		res, err := w.Store.applyAll(ctx, []metering.Batch{b}, parts)
		switch {
		case postgres.IsDataException(err):
			m.Err = fmt.Errorf("usage: Postgres refused the batch's data: %w", err)
			if m.Refused.Parts > 0 {
				m.Err = fmt.Errorf("%w; besides, parts that can never be applied: %w", m.Err, m.Refused.Err())
			}
			if err := w.Store.setAsideWhole(ctx, m.ID, m.ID+refusedSuffix, []byte(m.Payload), m.Err); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			f.results[i] = res[0]
		}
		f.done[i] = true
	}
	return nil
}

// logger returns w.Log, or a logger that discards.
func (w *Worker) logger() *slog.Logger {
	if w.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return w.Log
}
