package config

import (
	"os"
	"time"
)

// Store reads TOLLGATE_STORE: "redis" (the default: limiter state and the
// usage stream in Redis) or "memory" (one process, no Redis).
func (e *Env) Store() string {
	return e.OneOf("TOLLGATE_STORE", "redis", "redis", "memory")
}

// Usage is the usage pipeline's settings (TOLLGATE_USAGE_*), shared by the
// API processes that count decisions and the worker that applies them.
type Usage struct {
	// Sink is where an API process sends its batches: stream (Redis),
	// postgres (single-process mode) or none.
	Sink   string
	Stream string
	// Journal has the limiter store (Redis, with the stream sink) record
	// each admitted check's units in the call that admits it, for the
	// usage worker to apply; the stream then carries what the journal
	// lacks (denials, holds settled without one, addresses, crossings).
	Journal bool
	// Flush is how often an API process publishes; MaxRows and TopIPs
	// bound its memory.
	Flush   time.Duration
	MaxRows int
	TopIPs  int
	// Group and Consumer name the worker in the stream's consumer group;
	// ClaimIdle is how long a batch may sit unacknowledged with another
	// consumer before this one takes it over.
	Group     string
	Consumer  string
	ClaimIdle time.Duration
	// MinuteRetention is how many months of minute rows are kept.
	MinuteRetention int
	// ResourceCap is how many distinct resources a tenant's usage may
	// name in a month; more fold into "(other)" as batches are applied.
	ResourceCap int
	// RateAlertDenials, TenantRateAlertDenials and RateAlertWindow say
	// when denials by rate rules are sustained (ratelimit.sustained): more
	// than RateAlertDenials of one key, or TenantRateAlertDenials of one
	// tenant's keys together, within RateAlertWindow.
	RateAlertDenials       int
	TenantRateAlertDenials int
	RateAlertWindow        time.Duration
}

// Usage reads the usage settings for a process whose TOLLGATE_STORE is
// store: single-process mode (memory) has no Redis, so usage goes straight
// to Postgres by default.
func (e *Env) Usage(store string) Usage {
	defaultSink := "stream"
	if store == "memory" {
		defaultSink = "postgres"
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "worker"
	}
	return Usage{
		Sink:            e.OneOf("TOLLGATE_USAGE_SINK", defaultSink, "stream", "postgres", "none"),
		Stream:          e.String("TOLLGATE_USAGE_STREAM", "tollgate:usage"),
		Journal:         e.Bool("TOLLGATE_USAGE_JOURNAL", true),
		Flush:           e.Duration("TOLLGATE_USAGE_FLUSH", time.Second),
		MaxRows:         e.Int("TOLLGATE_USAGE_MAX_ROWS", 50_000, 100),
		TopIPs:          e.Int("TOLLGATE_USAGE_TOP_IPS", 100, 1),
		Group:           e.String("TOLLGATE_USAGE_GROUP", "tollgate-usage"),
		Consumer:        e.String("TOLLGATE_USAGE_CONSUMER", host),
		ClaimIdle:       e.Duration("TOLLGATE_USAGE_CLAIM_IDLE", 30*time.Second),
		MinuteRetention: e.Int("TOLLGATE_USAGE_MINUTE_RETENTION", 3, 1),
		ResourceCap:     e.Int("TOLLGATE_USAGE_RESOURCE_CAP", 200, 1),
		// quota.DefaultRateAlertDenials, DefaultTenantRateAlertDenials and
		// DefaultRateAlertWindow.
		RateAlertDenials:       e.Int("TOLLGATE_RATELIMIT_ALERT_DENIALS", 100, 1),
		TenantRateAlertDenials: e.Int("TOLLGATE_RATELIMIT_TENANT_ALERT_DENIALS", 1000, 1),
		RateAlertWindow:        e.Duration("TOLLGATE_RATELIMIT_ALERT_WINDOW", 5*time.Minute),
	}
}
