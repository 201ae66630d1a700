package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
)

// TestRememberedDenialsAreCapped: a long wait (a month's end, another
// lease's expiry) is remembered for MaxMemoryAge at most, then the
// request is asked again; the remembered decision still counts down the
// server's wait.
func TestRememberedDenialsAreCapped(t *testing.T) {
	const hour = 3_600_000
	cases := []struct {
		name, reason, algorithm string
	}{
		{"an hourly rule", "rate_limited", "gcra"},
		{"a monthly quota", "rate_limited", "fixed_window"},
		{"a spend cap", "spend_cap", "fixed_window"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &denier{clk: newClock(), reason: c.reason, algorithm: c.algorithm}
			s.wait.Store(hour)
			srv := httptest.NewServer(s)
			t.Cleanup(srv.Close)
			cl := newClient(t, srv.URL, client.Options{Now: s.clk.Now})
			ctx := context.Background()
			req := client.CheckRequest{Key: "tg_k", Resource: "GET /repos"}

			if d, err := cl.Check(ctx, req); err != nil || d.Remembered || d.RetryAfterMS != hour {
				t.Fatalf("first check = %+v, %v; want the server's denial", d, err)
			}
			s.clk.Advance(client.MaxMemoryAge - time.Millisecond)
			d, err := cl.Check(ctx, req)
			if err != nil || !d.Remembered || d.Reason != c.reason || d.RetryAfterMS != hour-999 {
				t.Errorf("%v later: %+v, %v; want remembered %s, retry %d ms", client.MaxMemoryAge-time.Millisecond, d, err, c.reason, hour-999)
			}
			s.clk.Advance(time.Millisecond)
			if d, err := cl.Check(ctx, req); err != nil || d.Remembered {
				t.Errorf("MaxMemoryAge later: remembered %v (%v); want the server asked again", d.Remembered, err)
			}
			if got := s.calls.Load(); got != 2 {
				t.Errorf("server saw %d checks, want 2", got)
			}
		})
	}
}

// TestDenialsNotRemembered: denials whose wait is no lower bound, or that
// are no rate decision, are asked again every time, however long the
// wait.
func TestDenialsNotRemembered(t *testing.T) {
	cases := []struct {
		name      string
		wait      int64
		reason    string
		algorithm string
		degraded  bool
	}{
		// A slot is freed when any request in flight ends, long before
		// the wait (the other lease's expiry).
		{"a concurrency rule", 3_600_000, "rate_limited", "concurrency", false},
		// The limiter could not be asked: only a check tells when it is
		// back.
		{"unavailable", 1000, "unavailable", "gcra", true},
		{"degraded", 5000, "rate_limited", "gcra", true},
		// A reason added later: nothing says what its wait means.
		{"an unknown reason", 5000, "something_new", "gcra", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &denier{clk: newClock(), reason: c.reason, algorithm: c.algorithm, degraded: c.degraded}
			s.wait.Store(c.wait)
			srv := httptest.NewServer(s)
			t.Cleanup(srv.Close)
			cl := newClient(t, srv.URL, client.Options{Now: s.clk.Now})
			for range 3 {
				d, err := cl.Check(context.Background(), client.CheckRequest{Key: "tg_k", Resource: "POST /v1/complete"})
				if err != nil || d.Allowed || d.Remembered {
					t.Fatalf("Check = %+v, %v; want the server's denial", d, err)
				}
			}
			if got := s.calls.Load(); got != 3 {
				t.Errorf("server saw %d checks, want 3", got)
			}
		})
	}
}

// holder stands in for the check API of tenants whose callers share one
// allowance: a check is admitted with a hold (and lease) when its tenant
// holds none, and denied for an hour while it does; settling or
// releasing the hold gives the allowance back. Keys are "tenant/name".
type holder struct {
	mu     sync.Mutex
	held   map[string]string // tenant → hold ID
	n      int
	checks int
	// decided, when set, runs after a check is decided, before it is
	// answered.
	decided func()
}

// onDecided sets h.decided.
func (h *holder) onDecided(f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.decided = f
}

func (h *holder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Key     string `json:"key"`
		HoldID  string `json:"hold_id"`
		LeaseID string `json:"lease_id"`
	}
	_ = json.NewDecoder(r.Body).Decode(&body)
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/check":
		tenant := body.Key[:len(body.Key)-len("/x")]
		h.mu.Lock()
		h.checks++
		d := map[string]any{"allowed": true, "reason": "ok", "tier": "authenticated", "tenant_id": tenant,
			"retry_after_ms": 0, "degraded": false, "rules": []any{}}
		if _, ok := h.held[tenant]; ok {
			d["allowed"], d["reason"], d["retry_after_ms"], d["policy"] = false, "rate_limited", 3_600_000, "hourly"
			d["rules"] = []any{map[string]any{"name": "hourly", "algorithm": "gcra", "mode": "enforce",
				"allowed": false, "retry_after_ms": 3_600_000}}
		} else {
			h.n++
			id := "h" + strconv.Itoa(h.n)
			h.held[tenant] = id
			d["hold_id"], d["lease_id"] = id, id
		}
		decided := h.decided
		h.mu.Unlock()
		if decided != nil {
			decided()
		}
		_ = json.NewEncoder(w).Encode(d)
	case "/v1/settle", "/v1/release":
		id := body.HoldID + body.LeaseID
		h.mu.Lock()
		for tenant, held := range h.held {
			if held == id {
				delete(h.held, tenant)
			}
		}
		h.mu.Unlock()
		if r.URL.Path == "/v1/settle" {
			_ = json.NewEncoder(w).Encode(map[string]any{"hold_id": id, "estimate": 1, "cost": 0, "status": "settled", "repeated": false})
		} else {
			_ = json.NewEncoder(w).Encode(map[string]any{"lease_id": id, "released": true})
		}
	}
}

// Checks returns how many checks reached the holder.
func (h *holder) Checks() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.checks
}

// TestGivingBackForgetsDenials: settling a hold or releasing a lease
// forgets the remembered denials of its tenant at once, whichever key of
// the tenant they are of, and no other tenant's; giving back a hold or
// lease this client did not open forgets every denial.
func TestGivingBackForgetsDenials(t *testing.T) {
	giveBacks := []struct {
		name string
		give func(ctx context.Context, c *client.Client, id string) error
	}{
		{"settle", func(ctx context.Context, c *client.Client, id string) error {
			_, err := c.Settle(ctx, id, 0)
			return err
		}},
		{"release", func(ctx context.Context, c *client.Client, id string) error {
			_, err := c.Release(ctx, id)
			return err
		}},
	}
	for _, g := range giveBacks {
		t.Run(g.name, func(t *testing.T) {
			h := &holder{held: map[string]string{}}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			c := newClient(t, srv.URL, client.Options{Now: newClock().Now}) // time stands still
			ctx := context.Background()
			check := func(key string) *client.Decision {
				t.Helper()
				d, err := c.Check(ctx, client.CheckRequest{Key: key, Resource: "POST /v1/complete"})
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			a1, a2, b := "tenant-a/1", "tenant-a/2", "tenant-b/1"
			heldA, heldB := check(a1), check(b)
			if !heldA.Allowed || heldA.HoldID == "" || !heldB.Allowed || heldB.HoldID == "" {
				t.Fatalf("first checks: %+v, %+v; want holds", heldA, heldB)
			}
			for _, key := range []string{a1, a2, b} {
				check(key) // denied, and remembered
			}
			for _, key := range []string{a1, a2, b} {
				if d := check(key); !d.Remembered {
					t.Fatalf("%s: %+v, want a remembered denial", key, d)
				}
			}
			if got := h.Checks(); got != 5 {
				t.Fatalf("holder saw %d checks, want 5", got)
			}

			if err := g.give(ctx, c, heldA.HoldID); err != nil {
				t.Fatal(err)
			}
			if d := check(a2); d.Remembered || !d.Allowed {
				t.Errorf("%s after tenant-a's %s: %+v, want asked and allowed", a2, g.name, d)
			}
			if d := check(a1); d.Remembered {
				t.Errorf("%s after tenant-a's %s: %+v, want asked", a1, g.name, d)
			}
			if d := check(b); !d.Remembered {
				t.Errorf("%s after tenant-a's %s: %+v, want still remembered", b, g.name, d)
			}
			if got := h.Checks(); got != 7 {
				t.Errorf("holder saw %d checks, want 7", got)
			}

			// An ID this client was not given (another process opened it):
			// whose it is is unknown, so every denial goes.
			if err := g.give(ctx, c, "opened-elsewhere"); err != nil {
				t.Fatal(err)
			}
			if d := check(b); d.Remembered {
				t.Errorf("%s after a %s of an unknown ID: %+v, want asked", b, g.name, d)
			}
		})
	}
}

// TestGiveBackDuringACheck: a denial answered after a settlement of its
// tenant's hold was sent may predate the settlement, and is not
// remembered.
func TestGiveBackDuringACheck(t *testing.T) {
	h := &holder{held: map[string]string{}}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	c := newClient(t, srv.URL, client.Options{Now: newClock().Now})
	ctx := context.Background()
	req := client.CheckRequest{Key: "tenant-a/1", Resource: "POST /v1/complete"}
	held, err := c.Check(ctx, req)
	if err != nil || held.HoldID == "" {
		t.Fatalf("first check: %+v, %v; want a hold", held, err)
	}

	// The second check is decided (denied) before the settlement, and
	// answered after it.
	decided, settled := make(chan struct{}), make(chan struct{})
	h.onDecided(func() {
		close(decided)
		<-settled
	})
	denied := make(chan *client.Decision)
	go func() {
		d, _ := c.Check(ctx, req)
		denied <- d
	}()
	<-decided
	h.onDecided(nil)
	if _, err := c.Settle(ctx, held.HoldID, 0); err != nil {
		t.Fatal(err)
	}
	// The holder kept its state as of the decision: deny again until
	// asked once more.
	close(settled)
	if d := <-denied; d == nil || d.Allowed {
		t.Fatalf("the check under way: %+v, want denied", d)
	}
	if d, err := c.Check(ctx, req); err != nil || d.Remembered {
		t.Errorf("after the settlement: %+v, %v; want asked", d, err)
	}
	if got := h.Checks(); got != 3 {
		t.Errorf("holder saw %d checks, want 3", got)
	}
}
