package main

import (
	"context"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/billing"
	"github.com/tollgate/tollgate/internal/buildinfo"
	"github.com/tollgate/tollgate/internal/config"
	"github.com/tollgate/tollgate/internal/credits"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/usage"
)

// usageConfig is the usage worker's configuration, read from TOLLGATE_*
// variables.
type usageConfig struct {
	Redis config.Redis
	// KeyPrefix starts the limiter state keys, as the api's
	// (TOLLGATE_KEY_PREFIX): the worker reads the tenants' monthly quota
	// counters and the credits drainer their balances under it.
	KeyPrefix string
	config.Usage
	// ServeWorker runs a worker inside `admin serve`.
	ServeWorker bool
	// Region is the region the worker serves (TOLLGATE_REGION*); `admin
	// worker` runs the region's exchanger when it is set.
	Region region.Config
	Log    *slog.Logger
}

func loadUsageConfig(getenv func(string) string, stderr io.Writer) (usageConfig, error) {
	e := config.New(getenv)
	// Single-process mode (TOLLGATE_STORE=memory) has no stream: the api
	// applies usage itself.
	store := e.Store()
	c := usageConfig{
		Redis:       e.Redis("127.0.0.1:6379"),
		KeyPrefix:   e.KeyPrefix(),
		Usage:       e.Usage(store),
		ServeWorker: e.Bool("TOLLGATE_SERVE_WORKER", store != "memory"),
		Region:      region.Read(e, false),
		Log:         e.Logger(stderr),
	}
	return c, e.Err()
}

// redis returns a client for the worker: go-redis's default timeouts,
// since the worker's reads block on the stream.
func (c usageConfig) redis() redis.UniversalClient {
	r := c.Redis
	r.Timeout = 0
	return r.Client()
}

// storeConfig is the usage tables' configuration, the same for the
// worker that writes them and the queries that read them.
func (c usageConfig) storeConfig() usage.StoreConfig {
	return usage.StoreConfig{MinuteRetention: c.MinuteRetention, ResourceCap: c.ResourceCap}
}

// reader returns the usage queries.
func (c usageConfig) reader(e *invocation) *usage.Reader {
	return usage.NewReader(e.db, c.storeConfig())
}

// writer returns the store the usage worker applies batches with, quota's
// ingest plugged in; its sweep reads the tenants' monthly quota counters
// from counters.
func (c usageConfig) writer(e *invocation, counters limiter.WindowReader) *usage.Store {
	cfg := c.storeConfig()
	cfg.Hooks = []usage.Hook{quota.NewIngest(e.db, quota.IngestConfig{
		RateAlert: quota.RateAlert{Denials: int64(c.RateAlertDenials), TenantDenials: int64(c.TenantRateAlertDenials), Window: c.RateAlertWindow},
		Counters:  counters, KeyPrefix: c.KeyPrefix})}
	return usage.NewStore(e.db, cfg)
}

// newWorker returns a usage worker on the stream and a function that
// releases its Redis client.
func newWorker(c usageConfig, e *invocation, log *slog.Logger) (*usage.Worker, func()) {
	redisstore.SetLogger(log) // go-redis's own lines (failed dials) too
	client := c.redis()
	// The journals the checks wrote are claimed every second, between
	// reads of the stream, which wait at most that long for new entries.
	w := &usage.Worker{
		Consumer: usage.Consumers{
			Journal: usage.NewJournalConsumer(client, c.KeyPrefix, time.Second),
			Stream: usage.NewRedisConsumer(client, usage.RedisConsumerConfig{
				Stream: c.Stream, Group: c.Group, Consumer: c.Consumer, ClaimIdle: c.ClaimIdle, Block: time.Second,
			}),
		},
		Store: c.writer(e, redisstore.New(client)),
		Log:   log,
	}
	return w, func() { client.Close() }
}

// newRegistry returns a metrics registry with the Go runtime's and the
// process's metrics and tollgate_build_info.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildinfo.Collector())
	return reg
}

const workerHelp = `
Reads the Redis Stream TOLLGATE_USAGE_STREAM in the consumer group
TOLLGATE_USAGE_GROUP as TOLLGATE_USAGE_CONSUMER (keep it stable across
restarts: a worker takes back its own unacknowledged batches at once,
another's only after TOLLGATE_USAGE_CLAIM_IDLE). Redis is TOLLGATE_REDIS_*.`

func worker(fs *flag.FlagSet) action {
	metricsAddr := fs.String("metrics-addr", "", "serve Prometheus metrics at /metrics on this address, e.g. :9091")
	return func(ctx context.Context, e *invocation) error {
		c, err := loadUsageConfig(e.getenv, e.stderr)
		if err != nil {
			return err
		}
		log := c.Log
		redisstore.SetLogger(log) // go-redis's own lines (failed dials) too
		w, release := newWorker(c, e, log)
		defer release()
		var reg prometheus.Registerer // nil: no metrics
		if *metricsAddr != "" {
			registry := newRegistry()
			reg = registry
			w.Register(registry)
			ln, err := net.Listen("tcp", *metricsAddr)
			if err != nil {
				return fmt.Errorf("--metrics-addr=%s: %w", *metricsAddr, err)
			}
			srv := &http.Server{Handler: promhttp.HandlerFor(registry, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
			go srv.Serve(ln) //nolint:errcheck // closed below
			defer srv.Close()
		}
		defer startCreditsDrainer(ctx, e, c, log, reg)()
		stopExchange, err := startExchanger(ctx, e, c, log, reg)
		if err != nil {
			return err
		}
		defer stopExchange()
		log.Info("usage worker running", "stream", c.Stream, "group", c.Group, "consumer", c.Consumer)
		err = w.Run(ctx)
		s := w.Stats()
		log.Info("usage worker stopped", "applied", s.Applied, "duplicates", s.Duplicates, "set_aside", s.SetAside)
		return err
	}
}

// startServeWorker runs a usage worker beside the admin server unless
// TOLLGATE_SERVE_WORKER=false, its metrics on reg when not nil; stop ends
// it and waits.
func startServeWorker(ctx context.Context, e *invocation, c usageConfig, log *slog.Logger, reg prometheus.Registerer) (stop func(), err error) {
	if !c.ServeWorker {
		return func() {}, nil
	}
	w, release := newWorker(c, e, log)
	if reg != nil {
		w.Register(reg)
	}
	stopCredits := startCreditsDrainer(ctx, e, c, log, reg)
	stopWorker := goUntilStopped(ctx, func(ctx context.Context) {
		if err := w.Run(ctx); err != nil {
			log.Error("usage worker stopped", "err", err)
		}
	})
	log.Info("usage worker running", "stream", c.Stream, "consumer", c.Consumer)
	return func() { stopWorker(); release(); stopCredits() }, nil
}

const setAsideHelp = `
An entry ID is the stream entry's, or the journal claim's (journal:…);
followed by /refused when only parts of its batch (the rows named in the
error) were set aside and the rest was applied. What was set aside is not
counted anywhere else: the metric tollgate_usage_batches_set_aside_total
counts these records as the worker makes them.`

func usageSetAside(fs *flag.FlagSet) action {
	limit := fs.Int("limit", 50, "list at most this many, from 1 to 10000")
	payload := fs.Bool("payload", false, "include what was set aside, in its wire form (with --json)")
	return listAction(fs, "set-aside batches", []string{"RECORDED", "ENTRY", "ERROR"},
		func(ctx context.Context, e *invocation) ([]usage.SetAside, func(usage.SetAside) []string, error) {
			if *limit < 1 || *limit > 10_000 {
				return nil, nil, errors.New("--limit must be from 1 to 10000")
			}
			list, err := usage.NewReader(e.db, usage.StoreConfig{}).SetAsides(ctx, *limit, *payload)
			return list, func(b usage.SetAside) []string {
				return []string{timeCell(&b.RecordedAt), b.EntryID, b.Error}
			}, err
		})
}

func report(fs *flag.FlagSet) action {
	month := monthFlag(fs, "calendar month (UTC), e.g. 2026-10 (required)")
	tenant := tenantFlag(fs, "tenant ID or name (default: every tenant)")
	format := fs.String("format", "json", "json or csv")
	late := fs.Bool("late", false, "list usage that arrived after the month was closed instead (JSON, or CSV with --format csv)")
	return func(ctx context.Context, e *invocation) error {
		m, err := month.parse(e)
		if err != nil {
			return err
		}
		if *format != "json" && *format != "csv" {
			return fmt.Errorf("report: --format: must be json or csv")
		}
		c, err := loadUsageConfig(e.getenv, e.stderr)
		if err != nil {
			return err
		}
		store := billing.NewStore(e.db, nil)
		tenantID, err := optionalTenantID(ctx, e, tenant)
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if *late {
			rows, err := c.reader(e).Late(ctx, m, tenantID)
			if err != nil {
				return err
			}
			if *format == "csv" {
				return writeLateCSV(e.stdout, rows)
			}
			return printJSON(e.stdout, map[string]any{"month": m.String(), "late_usage": rows})
		}
		var list []billing.Statement
		if tenantID != "" {
			st, err := store.Statement(ctx, tenantID, m)
			if err != nil {
				return err
			}
			list = []billing.Statement{st}
		} else if list, err = store.Statements(ctx, m, progress(e, "statements for "+m.String())); err != nil {
			return err
		}
		if *format == "csv" {
			return billing.WriteCSV(e.stdout, list)
		}
		if tenantID != "" {
			return printJSON(e.stdout, list[0])
		}
		return printJSON(e.stdout, map[string]any{"month": m.String(), "statements": list})
	}
}

func closeMonth(fs *flag.FlagSet) action {
	month := monthFlag(fs, "calendar month (UTC) to close, e.g. 2026-10 (required)")
	asJSON := fs.Bool("json", false, "print the result as JSON")
	return func(ctx context.Context, e *invocation) error {
		m, err := month.parse(e)
		if err != nil {
			return err
		}
		if _, err := loadUsageConfig(e.getenv, e.stderr); err != nil {
			return err
		}
		inv, c, err := e.invoicing(nil)
		if err != nil {
			return err
		}
		if inv.Enabled() && *asJSON {
			// On stderr: stdout is the result, as JSON (the text result
			// below says it itself).
			fmt.Fprintln(e.stderr, c.pushMode())
		}
		res, err := billing.NewOps(e.db, nil).WithInvoicing(inv).CloseMonth(ctx, audit.CLI, m, progress(e, "closing "+m.String()))
		if err != nil {
			return fmt.Errorf("close: %w", err)
		}
		if *asJSON {
			return printJSON(e.stdout, res)
		}
		if res.AlreadyClosed {
			fmt.Fprintf(e.stdout, "%s was already closed at %s; nothing changed.\n", res.Month, res.ClosedAt.Format(time.RFC3339))
		} else {
			fmt.Fprintf(e.stdout, "closed %s at %s.\n", res.Month, res.ClosedAt.Format(time.RFC3339))
		}
		fmt.Fprintf(e.stdout, "statements: %d; total: %s\n", res.Statements, formatTotals(res.TotalMinor))
		if r := res.Invoices; r != nil {
			fmt.Fprintf(e.stdout, "invoices issued: %d; pushed to Stripe: %d; failed (retried): %d; refused for good: %d; pending: %d\n",
				res.InvoicesIssued, r.Pushed, r.Failed-r.Refused, r.Refused, r.Pending)
			fmt.Fprintln(e.stdout, c.pushMode())
			if r.Refused > 0 {
				fmt.Fprintf(e.stdout, "see `admin invoices list --month %s`: retarget or bill outside the refused ones\n", res.Month)
			}
		} else if res.InvoicesIssued > 0 {
			fmt.Fprintf(e.stdout, "invoices issued: %d, pending: TOLLGATE_STRIPE_SECRET_KEY is not set here; admin serve pushes them (or admin invoices push where it is set)\n",
				res.InvoicesIssued)
		}
		if res.Late.Decisions() > 0 {
			fmt.Fprintf(e.stdout, "late usage since closing (not billed): %d decisions, %d allowed units; see `admin report --month %s --late`\n",
				res.Late.Decisions(), res.Late.AllowedUnits, res.Month)
		}
		if l := res.LateCredits; l != (credits.Late{}) {
			fmt.Fprintf(e.stdout, "late credits since closing (not on the statements): %d drawn, %d overage, %d unpaid, %d expired units\n",
				l.Drawn, l.Overage, l.Unpaid, l.Expired)
		}
		if n := len(res.CreditsBehind); n > 0 {
			fmt.Fprintf(e.stdout, "%d tenant(s) closed before their credits were drained past the month's end (their draws since come as late credits): %s\n",
				n, strings.Join(res.CreditsBehind, ", "))
		}
		return nil
	}
}

// monthRef is a --month flag: a calendar month (UTC) such as 2026-10.
type monthRef struct{ value *string }

// monthFlag declares the required --month flag on fs with usage.
func monthFlag(fs *flag.FlagSet, usage string) monthRef {
	return monthRef{fs.String("month", "", usage)}
}

// parse reads the flag; its error names the command and the flag.
func (f monthRef) parse(e *invocation) (usage.Month, error) {
	m, err := usage.ParseMonth(*f.value)
	if err != nil {
		problem := "must be a month such as 2026-10"
		var invalid *tollgate.Error
		if errors.As(err, &invalid) && invalid.Fields["month"] != "" {
			problem = invalid.Fields["month"]
		}
		return usage.Month{}, fmt.Errorf("%s: --month: %s", e.name, problem)
	}
	return m, nil
}

// formatTotals formats totals by currency in major units, with the
// minor units the statements hold, e.g. "388.20 USD (38820 minor
// units), 900 JPY (900 minor units)", or "0" when there are none.
func formatTotals(totals map[string]int64) string {
	if len(totals) == 0 {
		return "0"
	}
	currencies := slices.Sorted(maps.Keys(totals))
	parts := make([]string, len(currencies))
	for i, c := range currencies {
		parts[i] = fmt.Sprintf("%s %s (%d minor units)", majorUnits(totals[c], c), c, totals[c])
	}
	return strings.Join(parts, ", ")
}

// majorUnits writes an amount of minor units in major units, with the
// currency's decimals (tollgate.MinorDigits): 38820 USD is "388.20",
// 900 JPY "900", 1005 BHD "1.005".
func majorUnits(minor int64, currency string) string {
	digits := tollgate.MinorDigits(currency)
	s := strconv.FormatInt(minor, 10)
	sign := ""
	if minor < 0 {
		sign, s = "-", s[1:]
	}
	if digits == 0 {
		return sign + s
	}
	if len(s) <= digits {
		s = strings.Repeat("0", digits-len(s)+1) + s
	}
	return sign + s[:len(s)-digits] + "." + s[len(s)-digits:]
}

// writeLateCSV writes late usage rows as CSV, a header first.
func writeLateCSV(w io.Writer, rows []usage.LateRow) error {
	cw := csv.NewWriter(w)
	_ = cw.Write([]string{"batch_id", "tenant_id", "key_id", "resource", "minute", "recorded_at", "allowed", "denied", "allowed_units", "denied_units"})
	for _, r := range rows {
		_ = cw.Write([]string{r.BatchID, r.TenantID, r.KeyID, r.Resource, r.Minute.UTC().Format(time.RFC3339), r.RecordedAt.UTC().Format(time.RFC3339Nano),
			strconv.FormatInt(r.Allowed, 10), strconv.FormatInt(r.Denied, 10), strconv.FormatInt(r.AllowedUnits, 10), strconv.FormatInt(r.DeniedUnits, 10)})
	}
	cw.Flush()
	return cw.Error()
}

// progress reports progress on stderr, only when stdout is a terminal (a
// person is watching, and piped output stays clean).
func progress(e *invocation, label string) billing.Progress {
	if !isTerminal(e.stdout) {
		return nil
	}
	return func(done, total int) {
		fmt.Fprintf(e.stderr, "\r%s: %d/%d tenants", label, done, total)
		if done == total {
			fmt.Fprintln(e.stderr)
		}
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
