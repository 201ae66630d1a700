package events

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/postgres"
)

// DelivererConfig configures a Deliverer; zero fields take the defaults.
type DelivererConfig struct {
	DB  *pgxpool.Pool
	Log *slog.Logger
	// Now is the clock of due times, leases and signatures (time.Now).
	Now func() time.Time
	// Guard refuses private addresses at connect time.
	Guard Guard
	// Timeout bounds one attempt, from dial to the response's first KiB
	// (10s).
	Timeout time.Duration
	// Poll is how often due deliveries are looked for without a
	// notification: retries come due this way (250ms).
	Poll time.Duration
	// Concurrency is how many attempts one deliverer makes at once (8).
	Concurrency int
	// Metrics, when set, counts attempts' outcomes.
	Metrics *Metrics
	// Random returns numbers in [0, 1) for the retries' jitter.
	Random func() float64
	// SecretKeys open the endpoints' sealed secrets (TOLLGATE_SECRET_KEY
	// and its previous keys). A secret that cannot be opened fails the
	// attempt, which is retried.
	SecretKeys *auth.SecretKeys
}

// Deliverer sends due deliveries. Any number of deliverers, in any
// number of processes, may run on one database: each leases the
// deliveries it sends (FOR UPDATE SKIP LOCKED, then a lease longer than
// an attempt), so that no two send the same attempt, and a crashed one's
// deliveries are taken by another when the lease ends.
type Deliverer struct {
	cfg    DelivererConfig
	client *http.Client
	lease  time.Duration
	// sealed limits the log lines of endpoints whose secrets no
	// configured key opens.
	sealed sealedLog
}

// bodyKept is how much of a response's body an attempt keeps.
const bodyKept = 1024

// NewDeliverer returns a deliverer on cfg.
func NewDeliverer(cfg DelivererConfig) *Deliverer {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Second
	}
	if cfg.Poll <= 0 {
		cfg.Poll = 250 * time.Millisecond
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 8
	}
	if cfg.Random == nil {
		cfg.Random = uniform
	}
	transport := &http.Transport{
		Proxy:                 nil, // a proxy would connect where the guard cannot see
		DialContext:           cfg.Guard.Dialer(cfg.Timeout).DialContext,
		TLSHandshakeTimeout:   cfg.Timeout,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
	}
	return &Deliverer{cfg: cfg, lease: 2*cfg.Timeout + 5*time.Second, client: &http.Client{
		Transport: transport,
		Timeout:   cfg.Timeout,
		// A redirect is an answer, not a place to follow.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// Run sends deliveries until ctx ends: when new ones are committed
// (LISTEN tollgate_webhooks), every Poll, and whenever an attempt ends.
// It keeps up to Concurrency attempts under way, leasing a delivery only
// when a slot is free to send it at once (so that every attempt starts
// within its lease), and at most half of them (at least one) to one
// endpoint, so that a slow endpoint, however long its backlog, leaves
// the others slots to go on delivering. It returns nil when ctx ends,
// once its attempts have.
func (d *Deliverer) Run(ctx context.Context) error {
	wake := make(chan struct{}, 1)
	go d.listen(ctx, wake)
	tick := time.NewTicker(d.cfg.Poll)
	defer tick.Stop()
	free := d.cfg.Concurrency
	perEndpoint := max(1, d.cfg.Concurrency/2)
	busy := map[string]int{}                      // attempts under way by endpoint
	freed := make(chan string, d.cfg.Concurrency) // the endpoint of an attempt that ended
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		for free > 0 {
			var full []string
			for ep, n := range busy {
				if n >= perEndpoint {
					full = append(full, ep)
				}
			}
			batch, err := d.claim(ctx, free, full)
			if err != nil {
				if ctx.Err() == nil {
					d.cfg.Log.Warn("webhooks: deliver", "err", err)
				}
				break
			}
			if len(batch) == 0 {
				break // nothing more is due now
			}
			for _, c := range batch {
				free--
				busy[c.endpoint]++
				wg.Go(func() {
					if err := d.attempt(ctx, c); err != nil && ctx.Err() == nil {
						d.cfg.Log.Warn("webhooks: deliver", "err", err)
					}
					freed <- c.endpoint
				})
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case ep := <-freed:
			free++
			d.ended(busy, ep)
		case <-wake:
		case <-tick.C:
		}
		for more := true; more; {
			select {
			case ep := <-freed:
				free++
				d.ended(busy, ep)
			default:
				more = false
			}
		}
	}
}

// ended counts an attempt to ep as ended in busy.
func (d *Deliverer) ended(busy map[string]int, ep string) {
	if busy[ep]--; busy[ep] <= 0 {
		delete(busy, ep)
	}
}

// listen signals wake on every notification of new deliveries, holding
// one connection; on an error it waits a poll and listens again.
func (d *Deliverer) listen(ctx context.Context, wake chan<- struct{}) {
	for ctx.Err() == nil {
		err := func() error {
			conn, err := d.cfg.DB.Acquire(ctx)
			if err != nil {
				return err
			}
			defer conn.Release()
			if _, err := conn.Exec(ctx, "LISTEN tollgate_webhooks"); err != nil {
				return err
			}
			defer conn.Conn().Close(context.Background()) //nolint:errcheck // a listening connection is not reused
			for {
				if _, err := conn.Conn().WaitForNotification(ctx); err != nil {
					return err
				}
				select {
				case wake <- struct{}{}:
				default:
				}
			}
		}()
		if ctx.Err() == nil {
			d.cfg.Log.Warn("webhooks: listen", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(d.cfg.Poll):
			}
		}
	}
}

// claimed is a delivery a deliverer holds the lease of, with what it
// needs to send it.
type claimed struct {
	id       int64
	token    string
	attempts int
	event    Event
	endpoint string
	url      string
	secrets  []string
}

// DeliverDue makes one attempt at each due delivery it can lease, up to
// Concurrency, all at once (at most one of each endpoint), and returns
// how many it made (for tests and tools; Run keeps its slots busy). It
// leases only what it sends at once: an attempt takes at most Timeout,
// well within the lease, so no attempt starts after its lease has ended
// (when another deliverer may have leased and sent it).
func (d *Deliverer) DeliverDue(ctx context.Context) (int, error) {
	batch, err := d.claim(ctx, d.cfg.Concurrency, nil)
	if err != nil || len(batch) == 0 {
		return 0, err
	}
	var wg sync.WaitGroup
	errs := make([]error, len(batch))
	for i, c := range batch {
		wg.Go(func() { errs[i] = d.attempt(ctx, c) })
	}
	wg.Wait()
	return len(batch), errors.Join(errs...)
}

// claimQuery leases deliveries: $1 now, $2 the lease's end, $3 its
// token, $4 how many at most, $5 the endpoints to skip.
//
// Each enabled endpoint not skipped offers its oldest due delivery,
// found through webhook_deliveries_endpoint_due without a lock; the
// oldest offers are then locked (SKIP LOCKED, the conditions checked
// again on the row locked) and leased. A disabled or skipped
// endpoint's deliveries are never read, however many are due: a
// claim costs one index probe per enabled endpoint. An offer another
// deliverer has just taken is skipped until the next claim.
const claimQuery = `WITH offer AS (
			SELECT head.id, head.next_attempt_at FROM webhook_endpoints w CROSS JOIN LATERAL (
				SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
				WHERE d.endpoint_id = w.id AND d.state = 'pending' AND d.next_attempt_at <= $1
					AND (d.lease_until IS NULL OR d.lease_until <= $1)
				ORDER BY d.next_attempt_at, d.id LIMIT 1) head
			WHERE w.disabled_at IS NULL AND w.id::text <> ALL($5::text[])
			ORDER BY head.next_attempt_at, head.id LIMIT $4 * 2),
		due AS (
			SELECT d.id FROM webhook_deliveries d JOIN offer o ON o.id = d.id
			WHERE d.state = 'pending' AND (d.lease_until IS NULL OR d.lease_until <= $1)
			ORDER BY o.next_attempt_at, o.id LIMIT $4 FOR UPDATE OF d SKIP LOCKED),
		leased AS (
			UPDATE webhook_deliveries d SET lease_until = $2, lease_token = $3::uuid FROM due WHERE d.id = due.id
			RETURNING d.id, d.attempts, d.event_id, d.endpoint_id)
		SELECT l.id, l.attempts, ev.id, ev.type, coalesce(ev.tenant_id::text, ''), ev.created_at, ev.data,
			w.id::text, w.url, w.secret, CASE WHEN w.previous_secret_until > $1 THEN w.previous_secret ELSE '' END
		FROM leased l JOIN events ev ON ev.id = l.event_id JOIN webhook_endpoints w ON w.id = l.endpoint_id`

// claim leases up to n due deliveries of enabled endpoints, the oldest
// due first, at most one of each endpoint, none of the endpoints skip
// names.
func (d *Deliverer) claim(ctx context.Context, n int, skip []string) ([]claimed, error) {
	now := d.cfg.Now()
	var tok [16]byte
	_, _ = rand.Read(tok[:])
	token := hex.EncodeToString(tok[:])
	if skip == nil {
		skip = []string{}
	}
	rows, err := d.cfg.DB.Query(ctx, claimQuery,
		now, now.Add(d.lease), token, n, skip)
	if err != nil {
		return nil, fmt.Errorf("events: claim deliveries: %w", err)
	}
	list, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (claimed, error) {
		c := claimed{token: token}
		var data []byte
		var secret, previous string
		err := r.Scan(&c.id, &c.attempts, &c.event.ID, &c.event.Type, &c.event.TenantID, &c.event.CreatedAt, &data,
			&c.endpoint, &c.url, &secret, &previous)
		c.event.Data = json.RawMessage(data)
		c.secrets = []string{secret}
		if previous != "" {
			c.secrets = append(c.secrets, previous)
		}
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("events: claim deliveries: %w", err)
	}
	return list, nil
}

// result is what one attempt found.
type result struct {
	at      time.Time
	status  int // 0: no response
	latency time.Duration
	body    string
	err     string
}

func (r result) ok() bool { return r.status >= 200 && r.status < 300 }

// attempt sends c once and records the attempt.
func (d *Deliverer) attempt(ctx context.Context, c claimed) error {
	res := d.send(ctx, c)
	// What was sent is recorded even when the deliverer is stopping: an
	// answer not recorded would be sent again once the lease ends.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.Timeout)
	defer cancel()
	return d.record(rctx, c, res)
}

// send posts c's event, signed, to its endpoint.
func (d *Deliverer) send(ctx context.Context, c claimed) result {
	res := result{at: d.cfg.Now()}
	body, err := json.Marshal(c.event)
	if err != nil {
		res.err = "encode: " + err.Error()
		return res
	}
	secrets := make([]string, len(c.secrets))
	for i, stored := range c.secrets {
		if secrets[i], _, err = openSecret(d.cfg.SecretKeys, c.endpoint, stored); err != nil {
			// Its deliveries wait, retried, until the key that sealed it
			// is configured (or the secret is rotated): the attempt
			// records the error, and the log says it once in a while.
			d.sealed.log(d.cfg.Log, res.at, c.endpoint, err)
			res.err = err.Error()
			return res
		}
	}
	sig, err := Signature(c.event.ID, res.at, body, secrets...)
	if err != nil {
		res.err = err.Error()
		return res
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		res.err = err.Error()
		return res
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Tollgate-Webhooks/1")
	req.Header.Set("webhook-id", c.event.ID)
	req.Header.Set("webhook-timestamp", fmt.Sprint(res.at.Unix()))
	req.Header.Set("webhook-signature", sig)
	start := time.Now()
	resp, err := d.client.Do(req)
	if err != nil {
		res.latency, res.err = time.Since(start), err.Error()
		return res
	}
	defer resp.Body.Close()
	kept, _ := io.ReadAll(io.LimitReader(resp.Body, bodyKept))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
	res.latency, res.status, res.body = time.Since(start), resp.StatusCode, string(bytes.ToValidUTF8(kept, nil))
	return res
}

// record writes c's attempt and what follows from it: the delivery
// delivered, retried later or failed; the endpoint's failing time, and
// the endpoint disabled (with webhook_endpoint.disabled) once it has
// failed for DisableAfter. A deliverer that lost its lease records
// nothing.
func (d *Deliverer) record(ctx context.Context, c claimed, res result) error {
	n := c.attempts + 1
	now := d.cfg.Now()
	outcome := "delivered"
	return postgres.Tx(ctx, d.cfg.DB, func(tx pgx.Tx) error {
		// The endpoint first, as deleting it does (then its deliveries):
		// the other order would deadlock with a deletion.
		if _, err := tx.Exec(ctx, `SELECT 1 FROM webhook_endpoints WHERE id = $1 FOR NO KEY UPDATE`, c.endpoint); err != nil {
			return fmt.Errorf("events: record attempt: %w", err)
		}
		state, next := "delivered", now
		if !res.ok() {
			wait, again := retryAfter(n, d.cfg.Random())
			state, next, outcome = "pending", now.Add(wait), "retrying"
			if !again {
				state, outcome = "failed", "failed"
			}
		}
		tag, err := tx.Exec(ctx, `UPDATE webhook_deliveries SET attempts = $3, state = $4, next_attempt_at = $5,
			lease_until = NULL, lease_token = NULL, finished_at = CASE WHEN $4 = 'pending' THEN NULL ELSE $6::timestamptz END
			WHERE id = $1 AND lease_token = $2::uuid`, c.id, c.token, n, state, next, now)
		if err != nil {
			return fmt.Errorf("events: record attempt: %w", err)
		}
		if tag.RowsAffected() == 0 {
			d.cfg.Log.Warn("webhooks: lease lost before the attempt was recorded", "delivery", c.id)
			return nil
		}
		var status *int
		if res.status != 0 {
			status = &res.status
		}
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_attempts (delivery_id, attempt, at, status, latency_us, response_body, error)
			VALUES ($1, $2, $3, $4, $5, $6, $7)`, c.id, n, res.at, status, res.latency.Microseconds(), res.body, res.err); err != nil {
			return fmt.Errorf("events: record attempt: %w", err)
		}
		if err := d.endpointHealth(ctx, tx, c.endpoint, res.ok(), now); err != nil {
			return err
		}
		d.cfg.Metrics.delivered(outcome)
		return nil
	})
}

// DisabledData is the payload of webhook_endpoint.disabled.
type DisabledData struct {
	EndpointID   string    `json:"endpoint_id"`
	URL          string    `json:"url"`
	FailingSince time.Time `json:"failing_since"`
	Reason       string    `json:"reason"`
}

// endpointHealth notes an attempt's outcome on its endpoint, and disables
// one that has failed for DisableAfter. A failure more than FailingGap
// after the endpoint's previous one starts its failing time again: the
// quiet time between them is not failing, however the attempts before it
// went.
func (d *Deliverer) endpointHealth(ctx context.Context, tx pgx.Tx, endpointID string, ok bool, now time.Time) error {
	if ok {
		_, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET failing_since = NULL WHERE id = $1 AND failing_since IS NOT NULL`, endpointID)
		return err
	}
	var owner, url string
	var since time.Time
	var enabled bool
	err := tx.QueryRow(ctx, `UPDATE webhook_endpoints SET
			failing_since = CASE WHEN failing_since IS NULL OR coalesce(last_failed_at, failing_since) < $3 THEN $2 ELSE failing_since END,
			last_failed_at = $2
		WHERE id = $1 RETURNING coalesce(owner_tenant_id::text, ''), url, failing_since, disabled_at IS NULL`,
		endpointID, now, now.Add(-FailingGap)).Scan(&owner, &url, &since, &enabled)
	if err != nil {
		return fmt.Errorf("events: note failing endpoint: %w", err)
	}
	if !enabled || since.After(now.Add(-DisableAfter)) {
		return nil
	}
	if _, err := tx.Exec(ctx, `UPDATE webhook_endpoints SET disabled_at = $2, disabled_reason = 'failing' WHERE id = $1`,
		endpointID, now); err != nil {
		return fmt.Errorf("events: disable failing endpoint: %w", err)
	}
	d.cfg.Log.Warn("webhooks: endpoint disabled after failing", "endpoint", endpointID, "failing_since", since)
	_, err = Emit(ctx, tx, Event{Type: WebhookEndpointDisabled, TenantID: owner, CreatedAt: now,
		Data: DisabledData{EndpointID: endpointID, URL: url, FailingSince: since, Reason: "failing"}})
	return err
}

// sealedLogEvery is how often the deliverer logs an endpoint whose secret
// no configured key opens: every attempt fails the same way, and retries
// and replays would make a line of each.
const sealedLogEvery = time.Minute

// sealedLog remembers when each endpoint whose secret no configured key
// opens was last logged. Safe for concurrent use.
type sealedLog struct {
	mu         sync.Mutex
	last       map[string]time.Time // by endpoint
	suppressed map[string]int       // attempts since that line
}

// log writes, at error level, that endpoint's secret cannot be opened,
// with err: at most once per sealedLogEvery and endpoint, counting the
// attempts in between.
func (l *sealedLog) log(log *slog.Logger, now time.Time, endpoint string, err error) {
	l.mu.Lock()
	if l.last == nil {
		l.last, l.suppressed = map[string]time.Time{}, map[string]int{}
	}
	if last, ok := l.last[endpoint]; ok && now.Sub(last) < sealedLogEvery {
		l.suppressed[endpoint]++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed[endpoint]
	l.last[endpoint], l.suppressed[endpoint] = now, 0
	for ep, at := range l.last { // forget the endpoints that stopped failing
		if now.Sub(at) >= 10*sealedLogEvery {
			delete(l.last, ep)
			delete(l.suppressed, ep)
		}
	}
	l.mu.Unlock()
	log.Error("webhooks: the endpoint's secret cannot be opened: its deliveries wait until the secret key that sealed it is configured "+
		"(TOLLGATE_SECRET_KEY_PREVIOUS), or, if that key is lost, until the endpoint is given a new secret (admin webhooks rotate-secret)",
		"endpoint", endpoint, "err", err, "attempts_since_last_line", suppressed)
}
