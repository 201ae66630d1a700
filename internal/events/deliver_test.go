package events_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/page"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/testkeys"
)

// TestReceiverDownThreeDays: a receiver that fails every request for 3
// days, then comes back, gets every event — none lost — with the same
// webhook-id on each redelivery, and the endpoint is not disabled.
func TestReceiverDownThreeDays(t *testing.T) {
	db, acme, _ := setup(t)
	clk := newClock()
	start := clk.Now()
	up := start.Add(72 * time.Hour)
	rcv := testenv.NewReceiver(t, func() int {
		if clk.Now().Before(up) {
			return 503
		}
		return 200
	})
	ops := events.NewOps(db, clk.Now, allowPrivate)
	ep := endpoint(t, ops, "", rcv.URL, events.EndpointInput{})
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate, Timeout: 5 * time.Second})

	var ids []string
	for i := range 20 {
		// Events keep coming during the outage.
		at := start.Add(time.Duration(i) * 3 * time.Hour)
		if at.After(clk.Now()) {
			drain(t, db, d, clk, at)
			clk.Set(at)
		}
		ids = append(ids, emit(t, db, events.KeyRevoked, acme.ID, clk.Now()).ID)
	}
	drain(t, db, d, clk, start.Add(10*24*time.Hour))

	byID := map[string][]testenv.Received{}
	for _, r := range rcv.Requests() {
		byID[r.ID] = append(byID[r.ID], r)
		if got := eventOf(t, r.Body)["id"]; got != r.ID {
			t.Errorf("webhook-id %s carries event %v", r.ID, got)
		}
	}
	for _, id := range ids {
		if len(byID[id]) < 2 {
			t.Errorf("event %s was sent %d times, want retries", id, len(byID[id]))
		}
	}
	var delivered, other int
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE state = 'delivered'),
		count(*) FILTER (WHERE state <> 'delivered') FROM webhook_deliveries`).Scan(&delivered, &other))
	if delivered != len(ids) || other != 0 {
		t.Errorf("deliveries: %d delivered, %d not, want %d and 0 (none lost)", delivered, other, len(ids))
	}
	got, err := events.NewStore(db).Endpoint(context.Background(), "", ep.Endpoint.ID)
	testenv.Must(t, err)
	if got.DisabledAt != nil || got.FailingSince != nil {
		t.Errorf("endpoint after recovery: disabled %v, failing since %v; want enabled and healthy", got.DisabledAt, got.FailingSince)
	}
	// The first event's attempts follow the schedule: the last failed one
	// at least 3 days after the event.
	first := byID[ids[0]]
	last := first[len(first)-1]
	ts, _ := strconv.ParseInt(last.Timestamp, 10, 64)
	if time.Unix(ts, 0).Before(up) {
		t.Errorf("first event's last attempt at %v, before the receiver came back at %v", time.Unix(ts, 0).UTC(), up)
	}
	t.Logf("first event: %d attempts over %v", len(first), time.Unix(ts, 0).Sub(start))
}

// TestScheduleLastsThreeDays: even with the shortest jitter, the retries
// span at least 3 days.
func TestScheduleLastsThreeDays(t *testing.T) {
	var total time.Duration
	for _, s := range events.Schedule {
		total += s - time.Duration(events.Jitter*float64(s))
	}
	if total < 72*time.Hour {
		t.Errorf("retries span %v at the least, want at least 72h", total)
	}
}

// TestEndpointDisabledAfterFiveDays: an endpoint that fails every attempt
// for 5 days is disabled, and webhook_endpoint.disabled reaches the
// operators' other endpoints.
func TestEndpointDisabledAfterFiveDays(t *testing.T) {
	db, acme, globex := setup(t)
	clk := newClock()
	down := testenv.NewReceiver(t, func() int { return 500 })
	watcher := testenv.NewReceiver(t, nil)
	ops := events.NewOps(db, clk.Now, allowPrivate)
	ep := endpoint(t, ops, acme.ID, down.URL, events.EndpointInput{})
	endpoint(t, ops, "", watcher.URL, events.EndpointInput{EventTypes: []string{events.WebhookEndpointDisabled}})
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate})
	start := clk.Now()
	es := events.NewStore(db)
	troubled := func(scope string) []events.Endpoint {
		t.Helper()
		list, err := es.Troubled(context.Background(), scope)
		testenv.Must(t, err)
		return list
	}
	for day := range 7 {
		at := start.Add(time.Duration(day) * 24 * time.Hour)
		drain(t, db, d, clk, at)
		clk.Set(at)
		emit(t, db, events.KeyRevoked, acme.ID, at)
		if day == 2 {
			// Failing, not yet disabled: the notice says when it will be.
			list := troubled(acme.ID)
			if len(list) != 1 || list[0].DisabledAt != nil || list[0].DisablesAt == nil ||
				!list[0].DisablesAt.Equal(list[0].FailingSince.Add(events.DisableAfter)) {
				t.Fatalf("troubled endpoints on day 2: %+v, want the failing one with disables_at", list)
			}
		}
	}
	drain(t, db, d, clk, start.Add(12*24*time.Hour))
	got, err := es.Endpoint(context.Background(), "", ep.Endpoint.ID)
	testenv.Must(t, err)
	if got.DisabledAt == nil || got.DisabledReason != "failing" {
		t.Fatalf("endpoint failing for days: disabled_at %v reason %q, want disabled for failing", got.DisabledAt, got.DisabledReason)
	}
	if list := troubled(""); len(list) != 1 || list[0].ID != ep.Endpoint.ID || list[0].DisabledReason != "failing" || list[0].DisablesAt != nil {
		t.Errorf("troubled endpoints after the disabling: %+v, want the disabled one", list)
	}
	if list := troubled(globex.ID); len(list) != 0 {
		t.Errorf("another tenant's troubled endpoints: %+v, want none", list)
	}
	if d := got.DisabledAt.Sub(*got.FailingSince); d < events.DisableAfter || d > events.DisableAfter+13*time.Hour {
		t.Errorf("disabled %v after it began failing, want about %v", d, events.DisableAfter)
	}
	reqs := watcher.Requests()
	if len(reqs) != 1 || eventOf(t, reqs[0].Body)["type"] != events.WebhookEndpointDisabled {
		t.Fatalf("the operators' endpoint got %d requests, want one webhook_endpoint.disabled", len(reqs))
	}
	if data := eventOf(t, reqs[0].Body)["data"].(map[string]any); data["endpoint_id"] != ep.Endpoint.ID {
		t.Errorf("webhook_endpoint.disabled names %v, want %s", data["endpoint_id"], ep.Endpoint.ID)
	}
}

// TestEveryAttemptStartsWithinItsLease: a deliverer leases only what it
// sends at once. With one attempt at a time, each taking the whole
// timeout (the receiver moves the clock on by it), every attempt still
// starts while its delivery's lease holds; a deliverer that leased more
// than it sends at once would start the later ones after their leases
// ended, when another deliverer may already have sent them.
func TestEveryAttemptStartsWithinItsLease(t *testing.T) {
	db, acme, _ := setup(t)
	clk := newClock()
	const timeout = 10 * time.Second
	rcv := testenv.NewReceiver(t, nil)
	var late []string
	var mu sync.Mutex
	rcv.Config.Handler = httpHandlerFunc(func(id string, serve func()) {
		var leaseUntil time.Time
		testenv.Must(t, db.QueryRow(context.Background(),
			`SELECT lease_until FROM webhook_deliveries WHERE event_id = $1`, id).Scan(&leaseUntil))
		mu.Lock()
		if !clk.Now().Before(leaseUntil) {
			late = append(late, fmt.Sprintf("%s at %s, lease until %s", id, clk.Now().Format(time.TimeOnly), leaseUntil.Format(time.TimeOnly)))
		}
		clk.Advance(timeout)
		mu.Unlock()
		serve()
	}, rcv.Config.Handler)
	endpoint(t, events.NewOps(db, nil, allowPrivate), "", rcv.URL, events.EndpointInput{})
	const n = 6
	for range n {
		emit(t, db, events.TenantSuspended, acme.ID, clk.Now())
	}
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate, Timeout: timeout, Concurrency: 1})
	sent := 0
	for sent < n {
		k, err := d.DeliverDue(context.Background())
		testenv.Must(t, err)
		if k == 0 {
			t.Fatalf("%d of %d sent, then nothing due", sent, n)
		}
		sent += k
	}
	if len(late) > 0 {
		t.Errorf("attempts started after their lease ended:\n%s", strings.Join(late, "\n"))
	}
}

// TestASlowEndpointHoldsOnlyItsOwnSlot: while one endpoint keeps an
// attempt open, Run goes on delivering to the others with its other
// slots, leasing each delivery as a slot frees.
func TestASlowEndpointHoldsOnlyItsOwnSlot(t *testing.T) {
	db, acme, _ := setup(t)
	release := make(chan struct{})
	slow := testenv.NewReceiver(t, nil)
	slow.Config.Handler = httpHandlerFunc(func(_ string, serve func()) {
		<-release // fault injection: the endpoint answers only when the test lets it
		serve()
	}, slow.Config.Handler)
	var released sync.Once
	let := func() { released.Do(func() { close(release) }) }
	t.Cleanup(let) // before the receiver closes, which waits for its attempts
	fast := testenv.NewReceiver(t, nil)
	ops := events.NewOps(db, nil, allowPrivate)
	endpoint(t, ops, "", slow.URL, events.EndpointInput{EventTypes: []string{events.TenantSuspended}})
	endpoint(t, ops, "", fast.URL, events.EndpointInput{EventTypes: []string{events.KeyRevoked}})
	for range 3 { // a backlog of the slow endpoint's
		emit(t, db, events.TenantSuspended, acme.ID, time.Time{})
	}
	const n = 6
	for range n {
		emit(t, db, events.KeyRevoked, acme.ID, time.Time{})
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Guard: allowPrivate, Concurrency: 2})
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	testenv.Eventually(t, time.Now(), 10*time.Second, "the fast endpoint's deliveries while the slow one holds its attempt", func() (bool, string) {
		got := len(fast.Requests())
		return got == n, fmt.Sprintf("%d of %d delivered, the slow endpoint got %d", got, n, len(slow.Requests()))
	})
	cancel()
	let() // the slow attempts end, and with them Run
	testenv.Must(t, <-done)
}

// TestTwoDeliverersNeverSendTwice: deliverers sharing one database never
// send one attempt twice, whether at the same time or one after the other.
func TestTwoDeliverersNeverSendTwice(t *testing.T) {
	db, acme, _ := setup(t)
	var inFlight sync.Map
	var overlaps atomic.Int64
	rcv := testenv.NewReceiver(t, nil)
	slow := rcv.Config.Handler
	rcv.Config.Handler = httpHandlerFunc(func(id string, serve func()) {
		if _, busy := inFlight.LoadOrStore(id, true); busy {
			overlaps.Add(1)
		}
		// Fault injection: a slow receiver. Each attempt stays open 5 ms,
		// which widens the window in which another deliverer could claim
		// the same delivery; the duration is the fault, not a wait for
		// something to happen, and there is no event to wait for instead
		// (a duplicate that never comes cannot be awaited).
		time.Sleep(5 * time.Millisecond)
		serve()
		inFlight.Delete(id)
	}, slow)
	ops := events.NewOps(db, nil, allowPrivate)
	endpoint(t, ops, "", rcv.URL, events.EndpointInput{})
	const n = 300
	for range n {
		emit(t, db, events.TenantSuspended, acme.ID, time.Time{})
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for range 3 {
		d := events.NewDeliverer(events.DelivererConfig{DB: db, Guard: allowPrivate, Concurrency: 4})
		wg.Go(func() {
			for {
				k, err := d.DeliverDue(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if k == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	reqs := rcv.Requests()
	seen := map[string]int{}
	for _, r := range reqs {
		seen[r.ID]++
	}
	if len(reqs) != n || len(seen) != n {
		t.Errorf("%d requests for %d events (%d distinct), want each sent once", len(reqs), n, len(seen))
	}
	if overlaps.Load() != 0 {
		t.Errorf("%d attempts sent while the same one was in flight", overlaps.Load())
	}
}

// TestSignatureVerifiedIndependently: what the deliverer signs verifies
// with a from-scratch Standard Webhooks verifier and with openssl, with
// both secrets during a rotation's overlap and the new one alone after.
// Both secrets are stored sealed meanwhile.
func TestSignatureVerifiedIndependently(t *testing.T) {
	db, acme, _ := setup(t)
	clk := newClock()
	rcv := testenv.NewReceiver(t, nil)
	keys := testkeys.SecretKeys(t)
	ops := events.NewOps(db, clk.Now, allowPrivate).WithSecretKeys(keys)
	ep := endpoint(t, ops, acme.ID, rcv.URL, events.EndpointInput{})
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate, SecretKeys: keys})
	emit(t, db, events.KeyRotated, acme.ID, clk.Now())
	drain(t, db, d, clk, clk.Now().Add(time.Hour))
	rotated, err := ops.RotateSecret(context.Background(), audit.CLI, acme.ID, ep.Endpoint.ID)
	testenv.Must(t, err)
	stored := storedSecrets(t, db, ep.Endpoint.ID)
	for _, v := range stored {
		if !strings.HasPrefix(v, "sealed:") || strings.Contains(v, "whsec_") {
			t.Errorf("stored secret %.20s… is not sealed", v)
		}
	}
	if len(stored) != 2 {
		t.Errorf("stored secrets %d after a rotation, want 2 (current and previous)", len(stored))
	}
	emit(t, db, events.KeyRotated, acme.ID, clk.Now())
	drain(t, db, d, clk, clk.Now().Add(time.Hour))
	clk.Set(clk.Now().Add(events.RotationOverlap + time.Minute))
	emit(t, db, events.KeyRotated, acme.ID, clk.Now())
	drain(t, db, d, clk, clk.Now().Add(time.Hour))

	reqs := rcv.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3", len(reqs))
	}
	want := []struct {
		sigs    int
		secrets []string
	}{{1, []string{ep.Secret}}, {2, []string{ep.Secret, rotated.Secret}}, {1, []string{rotated.Secret}}}
	for i, r := range reqs {
		if got := len(strings.Fields(r.Signature)); got != want[i].sigs {
			t.Errorf("request %d carries %d signatures, want %d", i, got, want[i].sigs)
		}
		for _, secret := range want[i].secrets {
			if !verify(secret, r) {
				t.Errorf("request %d does not verify with %.12s…", i, secret)
			}
			if !verifyOpenSSL(t, secret, r) {
				t.Errorf("request %d does not verify with openssl and %.12s…", i, secret)
			}
		}
	}
	if verify(ep.Secret, reqs[2]) {
		t.Error("the secret rotated out still verifies after the overlap")
	}
	tampered := reqs[0]
	tampered.Body = append([]byte(nil), tampered.Body...)
	tampered.Body[len(tampered.Body)-2] ^= 1
	if verify(ep.Secret, tampered) {
		t.Error("a changed body verifies")
	}
}

// verify is a Standard Webhooks verifier written from the specification,
// sharing no code with the sender.
func verify(secret string, r testenv.Received) bool {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	if err != nil {
		return false
	}
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%s.%s", r.ID, r.Timestamp, r.Body)
	want := mac.Sum(nil)
	for _, sig := range strings.Fields(r.Signature) {
		v, b64, ok := strings.Cut(sig, ",")
		got, err := base64.StdEncoding.DecodeString(b64)
		if ok && v == "v1" && err == nil && hmac.Equal(got, want) {
			return true
		}
	}
	return false
}

// verifyOpenSSL computes the signature with the openssl command.
func verifyOpenSSL(t *testing.T, secret string, r testenv.Received) bool {
	t.Helper()
	openssl, err := exec.LookPath("openssl")
	if err != nil {
		t.Skip("openssl is not installed")
	}
	key, _ := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	cmd := exec.Command(openssl, "dgst", "-sha256", "-mac", "HMAC", "-macopt", fmt.Sprintf("hexkey:%x", key), "-binary")
	cmd.Stdin = strings.NewReader(r.ID + "." + r.Timestamp + "." + string(r.Body))
	out, err := cmd.Output()
	testenv.Must(t, err)
	return slices.Contains(strings.Fields(r.Signature), "v1,"+base64.StdEncoding.EncodeToString(out))
}

// TestLifecycleEvents: the tenant and key changes emit their events in
// their own transaction, once per actual change, and a refused change
// emits none.
func TestLifecycleEvents(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	ops := tenants.NewOps(db, nil)
	_, k1, err := tenants.NewStore(db).CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "one"})
	testenv.Must(t, err)
	_, k2, err := tenants.NewStore(db).CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "two"})
	testenv.Must(t, err)
	_, err = ops.RevokeKey(ctx, audit.CLI, acme.ID, k1.ID)
	testenv.Must(t, err)
	_, err = ops.RevokeKey(ctx, audit.CLI, acme.ID, k1.ID) // already revoked: no second event
	testenv.Must(t, err)
	rotated, err := ops.RotateKey(ctx, audit.CLI, acme.ID, k2.ID, tenants.RotateKeyInput{})
	testenv.Must(t, err)
	if _, err := ops.RotateKey(ctx, audit.CLI, acme.ID, k2.ID, tenants.RotateKeyInput{}); err == nil {
		t.Fatal("a key rotated twice")
	}
	for _, f := range []func(context.Context, audit.Actor, string) (tenants.Tenant, error){ops.Suspend, ops.Suspend, ops.Resume} {
		_, err := f(ctx, audit.CLI, acme.ID)
		testenv.Must(t, err)
	}
	list, err := events.NewStore(db).Events(ctx, acme.ID, "", page.First(100))
	testenv.Must(t, err)
	var types []string
	for i := len(list.Items) - 1; i >= 0; i-- {
		types = append(types, list.Items[i].Type)
	}
	want := []string{events.KeyRevoked, events.KeyRotated, events.TenantSuspended, events.TenantResumed}
	if len(types) != len(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Errorf("event %d is %s, want %s", i, types[i], want[i])
		}
	}
	var data tenants.KeyRotatedData
	testenv.Must(t, json.Unmarshal(list.Items[2].Data.(json.RawMessage), &data))
	if data.KeyID != k2.ID || data.NewKeyID != rotated.Key.ID {
		t.Errorf("key.rotated data %+v, want key %s replaced by %s", data, k2.ID, rotated.Key.ID)
	}
}

// storedSecrets returns what is stored of endpoint id's secrets: the
// current one and the previous one when there is one.
func storedSecrets(t *testing.T, db *pgxpool.Pool, id string) []string {
	t.Helper()
	var secret string
	var previous *string
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT secret, previous_secret FROM webhook_endpoints WHERE id = $1`,
		id).Scan(&secret, &previous))
	if previous == nil {
		return []string{secret}
	}
	return []string{secret, *previous}
}

// TestSecretsSealedAtRest: a secret stored in the clear by an earlier
// version still signs, is sealed by SealSecrets (once), and after the
// secret key is rotated (the old one kept as previous) is sealed again
// with the new key; deliveries verify with the original secret
// throughout, and fail (to be retried) without the key.
func TestSecretsSealedAtRest(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	clk := newClock()
	rcv := testenv.NewReceiver(t, nil)
	plain := events.NewOps(db, clk.Now, allowPrivate) // no keys: an earlier version's clear secret
	ep := endpoint(t, plain, acme.ID, rcv.URL, events.EndpointInput{})
	if got := storedSecrets(t, db, ep.Endpoint.ID); got[0] != ep.Secret {
		t.Fatalf("without keys the secret is stored as %.20s…, want in the clear", got[0])
	}
	oldKey := testkeys.SecretKeys(t)
	deliverWith := func(keys *auth.SecretKeys) {
		t.Helper()
		emit(t, db, events.KeyRevoked, acme.ID, clk.Now())
		d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate, SecretKeys: keys})
		drain(t, db, d, clk, clk.Now().Add(time.Minute))
	}
	deliverWith(oldKey)
	seal := func(keys *auth.SecretKeys, want int) {
		t.Helper()
		n, unopened, err := events.SealSecrets(ctx, db, keys)
		testenv.Must(t, err)
		if n != want || len(unopened) != 0 {
			t.Errorf("SealSecrets sealed %d endpoints (%v unopened), want %d", n, unopened, want)
		}
		if got := storedSecrets(t, db, ep.Endpoint.ID)[0]; !strings.HasPrefix(got, "sealed:") {
			t.Errorf("stored secret %.20s… after SealSecrets", got)
		}
	}
	seal(oldKey, 1)
	seal(oldKey, 0)
	deliverWith(oldKey)
	newKey, err := auth.ParseSecretKeys(auth.GenerateSecretKey(), testenv.SecretKey)
	testenv.Must(t, err)
	deliverWith(newKey) // opened with the previous key
	seal(newKey, 1)
	deliverWith(newKey)
	onlyNew, err := auth.ParseSecretKeys(auth.GenerateSecretKey())
	testenv.Must(t, err)
	// A key that opens nothing: the endpoint is left as it is and named.
	if n, unopened, err := events.SealSecrets(ctx, db, onlyNew); err != nil || n != 0 ||
		len(unopened) != 1 || unopened[0] != ep.Endpoint.ID {
		t.Errorf("SealSecrets with a key that opens nothing: %d sealed, unopened %v, %v; want 0 and the endpoint", n, unopened, err)
	}
	before := len(rcv.Requests())
	emit(t, db, events.KeyRevoked, acme.ID, clk.Now())
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate, SecretKeys: onlyNew})
	n, err := d.DeliverDue(ctx)
	testenv.Must(t, err)
	var errText string
	testenv.Must(t, db.QueryRow(ctx, `SELECT error FROM webhook_attempts ORDER BY id DESC LIMIT 1`).Scan(&errText))
	if n != 1 || len(rcv.Requests()) != before || !strings.Contains(errText, "open the secret") {
		t.Errorf("without the sealing key: %d attempts, %d requests sent, error %q; want 1 failed attempt, none sent",
			n, len(rcv.Requests())-before, errText)
	}
	reqs := rcv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("%d requests, want 4", len(reqs))
	}
	for i, r := range reqs {
		if !verify(ep.Secret, r) {
			t.Errorf("request %d does not verify with the endpoint's secret", i)
		}
	}
}

// TestUnopenedSecretLoggedOncePerMinute: a deliverer without the key that
// sealed an endpoint's secret (an admin process missing it during a
// rotation) logs so at error level — once a minute and endpoint, however
// many attempts fail meanwhile, not only in the attempts' records. Once
// the secret is rotated with the key lost, the old secret, which nothing
// can open, is not kept beside the new one, which signs alone at once.
func TestUnopenedSecretLoggedOncePerMinute(t *testing.T) {
	db, acme, _ := setup(t)
	ctx := context.Background()
	clk := newClock()
	rcv := testenv.NewReceiver(t, nil)
	lost := testkeys.SecretKeys(t)
	ep := endpoint(t, events.NewOps(db, clk.Now, allowPrivate).WithSecretKeys(lost), acme.ID, rcv.URL, events.EndpointInput{})
	other, err := auth.ParseSecretKeys(auth.GenerateSecretKey())
	testenv.Must(t, err)
	logs := &testenv.LogBuffer{}
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Now: clk.Now, Guard: allowPrivate, SecretKeys: other,
		Log: slog.New(slog.NewTextHandler(logs, nil))})
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "level=ERROR") && strings.Contains(l, "endpoint="+ep.Endpoint.ID) {
				out = append(out, l)
			}
		}
		return out
	}
	attempt := func() {
		t.Helper()
		emit(t, db, events.KeyRevoked, acme.ID, clk.Now())
		if n, err := d.DeliverDue(ctx); err != nil || n != 1 {
			t.Fatalf("DeliverDue: %d, %v; want one attempt", n, err)
		}
	}
	for range 3 {
		attempt()
	}
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "secret cannot be opened") ||
		!strings.Contains(got[0], "not configured") {
		t.Errorf("after 3 failed attempts in a minute the log has %q, want one error line naming the endpoint", got)
	}
	clk.Advance(time.Minute)
	attempt()
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "attempts_since_last_line=2") {
		t.Errorf("a minute later the log has %q, want a second line counting the 2 attempts in between", got)
	}
	if len(rcv.Requests()) != 0 {
		t.Fatalf("%d requests sent without the secret", len(rcv.Requests()))
	}

	// The key is lost for good: a new secret, sealed with the key at hand.
	rotated, err := events.NewOps(db, clk.Now, allowPrivate).WithSecretKeys(other).RotateSecret(ctx, audit.CLI, "", ep.Endpoint.ID)
	testenv.Must(t, err)
	if rotated.Endpoint.PreviousSecretUntil != nil || len(storedSecrets(t, db, ep.Endpoint.ID)) != 1 {
		t.Errorf("rotated with the key lost: previous secret kept until %v, want none", rotated.Endpoint.PreviousSecretUntil)
	}
	clk.Advance(time.Minute)
	emit(t, db, events.KeyRevoked, acme.ID, clk.Now())
	drain(t, db, d, clk, clk.Now().Add(time.Hour))
	reqs := rcv.Requests()
	if len(reqs) == 0 {
		t.Fatal("nothing delivered after the secret was rotated")
	}
	for i, r := range reqs {
		if !verify(rotated.Secret, r) || strings.Count(r.Signature, "v1,") != 1 {
			t.Errorf("request %d signed %q: want the new secret's signature alone", i, r.Signature)
		}
	}
}
