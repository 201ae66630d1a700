package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/client"
)

// TestReportCostRefusesANegativeCost: no settlement can be negative (the
// check API refuses one), so ReportCost refuses a negative cost and
// keeps what was reported before, else the estimate.
func TestReportCostRefusesANegativeCost(t *testing.T) {
	c, settled := newHoldAPI(t, nil)
	mw := c.Middleware(client.MiddlewareOptions{Cost: func(*http.Request) int64 { return 100 }, Hold: func(*http.Request) bool { return true }})
	cases := []struct {
		name    string
		reports []int64
		want    float64
	}{
		{"only a negative cost", []int64{-5}, 100},
		{"a negative cost after a valid one", []int64{7, -1}, 7},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil)
			req.Header.Set("Authorization", "Bearer tg_x")
			mw(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for _, cost := range tc.reports {
					if got, want := client.ReportCost(r.Context(), cost), cost >= 0; got != want {
						t.Errorf("ReportCost(%d) = %v, want %v", cost, got, want)
					}
				}
			})).ServeHTTP(httptest.NewRecorder(), req)
			if got := settledCost(t, settled); got != tc.want {
				t.Errorf("settled at %v, want %v", got, tc.want)
			}
		})
	}
}

// returnsAPI stands in for the check API: every check is admitted with
// the decision's extra fields; each settlement or release is passed to
// arrived, then answered by answer (attempt counts from 1 per path).
type returnsAPI struct {
	extra   string
	arrived chan leaseCall
	answer  func(w http.ResponseWriter, op string, attempt int) (answered bool) // nil: 200

	mu       sync.Mutex
	attempts map[string]int
}

func (a *returnsAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	_ = json.NewDecoder(r.Body).Decode(&body)
	w.Header().Set("Content-Type", "application/json")
	op := r.URL.Path[len("/v1/"):]
	if op == "check" {
		_, _ = io.WriteString(w, `{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"rules":[],`+a.extra+`}`)
		return
	}
	a.mu.Lock()
	a.attempts[op]++
	attempt := a.attempts[op]
	a.mu.Unlock()
	a.arrived <- leaseCall{op: op, body: body}
	if a.answer != nil && a.answer(w, op, attempt) {
		return
	}
	switch op {
	case "settle":
		_, _ = io.WriteString(w, `{"hold_id":"h1","estimate":100,"cost":0,"status":"settled","repeated":false}`)
	case "release":
		_, _ = io.WriteString(w, `{"lease_id":"l1","released":true}`)
	}
}

func newReturnsAPI(t *testing.T, extra string, answer func(w http.ResponseWriter, op string, attempt int) bool, opts client.Options) (*returnsAPI, *client.Client) {
	t.Helper()
	a := &returnsAPI{extra: extra, arrived: make(chan leaseCall, 100), answer: answer, attempts: map[string]int{}}
	srv := httptest.NewServer(a)
	t.Cleanup(srv.Close)
	return a, newClient(t, srv.URL, opts)
}

// problemAnswer writes a problem of status.
func problemAnswer(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail})
}

// dropConnection ends the connection without an answer: a transport
// error for the client.
func dropConnection(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// TestMiddlewareRetriesWhatTheAPICouldNotAnswer: the check API answers a
// settlement it could not make with a 503 ("retry the settlement"); a
// transport error, a 408 or a 429 from something in between is no
// answer either. The middleware tries the settlement again, at the same
// cost, until it is made; a refusal (422) is final. Releases likewise.
func TestMiddlewareRetriesWhatTheAPICouldNotAnswer(t *testing.T) {
	unanswered := func(w http.ResponseWriter, op string, attempt int) bool {
		switch attempt {
		case 1:
			dropConnection(w)
		case 2:
			problemAnswer(w, http.StatusServiceUnavailable, "the limiter store did not answer; retry the settlement")
		case 3:
			problemAnswer(w, http.StatusTooManyRequests, "slow down")
		default:
			return false
		}
		return true
	}
	refused := func(w http.ResponseWriter, op string, attempt int) bool {
		problemAnswer(w, http.StatusUnprocessableEntity, "invalid")
		return true
	}
	cases := []struct {
		name, extra string
		answer      func(w http.ResponseWriter, op string, attempt int) bool
		want        leaseCall
		attempts    int
	}{
		{"a settlement the API could not answer", `"hold_id":"h1"`, unanswered,
			leaseCall{op: "settle", body: map[string]any{"hold_id": "h1", "cost": 42.0}}, 4},
		{"a release the API could not answer", `"lease_id":"l1","lease_expires_at":"2099-01-01T00:00:00.000Z","lease_ttl_ms":60000`, unanswered,
			leaseCall{op: "release", body: map[string]any{"lease_id": "l1"}}, 4},
		{"a settlement refused", `"hold_id":"h1"`, refused,
			leaseCall{op: "settle", body: map[string]any{"hold_id": "h1", "cost": 42.0}}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, c := newReturnsAPI(t, tc.extra, tc.answer, client.Options{})
			req := httptest.NewRequest(http.MethodPost, "/v1/complete", nil)
			req.Header.Set("Authorization", "Bearer tg_x")
			c.Middleware(client.MiddlewareOptions{Cost: func(*http.Request) int64 { return 100 }})(
				http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { client.ReportCost(r.Context(), 42) }),
			).ServeHTTP(httptest.NewRecorder(), req)
			for i := range tc.attempts {
				if call := receive(t, a.arrived, 5*time.Second, "no give-back"); call.op != tc.want.op || !sameBody(call.body, tc.want.body) {
					t.Errorf("attempt %d: %+v, want %+v", i+1, call, tc.want)
				}
			}
			// Shutdown waits for the retries to end: none is left.
			if err := c.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			select {
			case call := <-a.arrived:
				t.Errorf("attempt %d: %+v, want %d attempts", tc.attempts+1, call, tc.attempts)
			default:
			}
		})
	}
}

func sameBody(got, want map[string]any) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if got[k] != v {
			return false
		}
	}
	return true
}

// TestResponsesWaitForTheFirstGiveBackOnly: the response of a held (or
// leased) request ends once the first attempt of its settlement (or
// release) is answered, so that the caller's next request finds what it
// gave back; an attempt the check API could not answer is retried after
// the response has ended, without holding it up, and Client.Shutdown
// waits for the retries.
func TestResponsesWaitForTheFirstGiveBackOnly(t *testing.T) {
	for _, tc := range []struct{ name, extra, op string }{
		{"a hold", `"hold_id":"h1"`, "settle"},
		{"a lease", `"lease_id":"l1","lease_expires_at":"2099-01-01T00:00:00.000Z","lease_ttl_ms":60000`, "release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			responded := make(chan struct{})
			unblock := make(chan struct{}) // the retry is answered once the response has arrived
			a, c := newReturnsAPI(t, tc.extra, func(w http.ResponseWriter, op string, attempt int) bool {
				if attempt == 1 {
					// A response that does not wait for this attempt
					// arrives meanwhile.
					select {
					case <-responded:
						t.Errorf("the response ended before the first %s was answered", op)
					case <-time.After(300 * time.Millisecond):
					}
					problemAnswer(w, http.StatusServiceUnavailable, "the limiter store did not answer; retry the settlement")
					return true
				}
				<-unblock
				return false
			}, client.Options{SettleTimeout: time.Minute})
			svc := httptest.NewServer(c.Middleware(client.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "answer")
			})))
			defer svc.Close()
			defer func() {
				select {
				case <-unblock:
				default:
					close(unblock)
				}
			}()
			req, _ := http.NewRequest(http.MethodPost, svc.URL+"/v1/complete", nil)
			req.Header.Set("Authorization", "Bearer tg_x")
			// Without an answer within 5 s, the response waited for the
			// retry of its give-back.
			resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				t.Fatalf("the response waited for the retry of its %s: %v", tc.op, err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			close(responded)
			if err != nil || string(body) != "answer" {
				t.Fatalf("answer %q, %v", body, err)
			}
			for attempt := 1; attempt <= 2; attempt++ {
				if call := receive(t, a.arrived, 5*time.Second, "no give-back"); call.op != tc.op {
					t.Errorf("attempt %d: %+v, want a %s", attempt, call, tc.op)
				}
			}
			ended, end := context.WithCancel(context.Background())
			end()
			if err := c.Shutdown(ended); !errors.Is(err, context.Canceled) {
				t.Errorf("Shutdown with the retry of the %s under way and its context ended = %v, want context.Canceled", tc.op, err)
			}
			close(unblock)
			if err := c.Shutdown(context.Background()); err != nil {
				t.Errorf("Shutdown = %v, want nil once the %s is done", err, tc.op)
			}
		})
	}
}

// slotAPI stands in for the check API of a concurrency rule of 1: a
// check is admitted with a lease (and a hold, if hold) while the slot is
// free, else denied; a release or a settlement frees the slot once its
// round trip's latency has passed.
type slotAPI struct {
	hold    bool
	latency time.Duration

	mu   sync.Mutex
	busy bool
	n    int // leases given
}

func (a *slotAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	switch r.URL.Path {
	case "/v1/check":
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.busy {
			_, _ = io.WriteString(w, `{"allowed":false,"reason":"rate_limited","tier":"authenticated","retry_after_ms":30000,"degraded":false,"policy":"inflight","rules":[]}`)
			return
		}
		a.busy = true
		a.n++
		id := strconv.Itoa(a.n)
		extra := `"lease_id":"l` + id + `","lease_expires_at":"2099-01-01T00:00:00.000Z","lease_ttl_ms":30000`
		if a.hold {
			extra += `,"hold_id":"h` + id + `"`
		}
		_, _ = io.WriteString(w, `{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"policy":"inflight","rules":[],`+extra+`}`)
	case "/v1/release", "/v1/settle":
		time.Sleep(a.latency) // the give-back's round trip
		a.mu.Lock()
		a.busy = false
		a.mu.Unlock()
		if r.URL.Path == "/v1/release" {
			_, _ = io.WriteString(w, `{"lease_id":"l1","released":true}`)
		} else {
			_, _ = io.WriteString(w, `{"hold_id":"h1","estimate":1,"cost":1,"status":"settled","repeated":false}`)
		}
	}
}

// TestSequentialCallersFindTheirSlotFree: on a concurrency rule of 1, a
// caller that sends each request once it has the answer to the one
// before is never denied: the response waits for the release (or the
// settlement) that frees its slot, however long its round trip.
func TestSequentialCallersFindTheirSlotFree(t *testing.T) {
	for _, tc := range []struct {
		name string
		hold bool
	}{
		{"a lease released", false},
		{"a hold settled", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := httptest.NewServer(&slotAPI{hold: tc.hold, latency: 50 * time.Millisecond})
			defer api.Close()
			c := newClient(t, api.URL, client.Options{})
			svc := httptest.NewServer(c.Middleware(client.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				_, _ = io.WriteString(w, "answer")
			})))
			defer svc.Close()
			for i := 1; i <= 10; i++ {
				if status, body := postAs(t, svc.URL+"/v1/complete", "tg_x"); status != http.StatusOK {
					t.Fatalf("request %d: %d %s, want 200: the slot of the request before was still taken", i, status, body)
				}
			}
			if err := c.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestLeaseRenewalIgnoresTheLocalClock: renewals are scheduled from the
// lease's TTL the check and each renewal answer, counted from when they
// were sent, never from the server's lease_expires_at read by a local
// clock: one ahead of the server's by more than the TTL would never renew,
// one behind would renew too late.
func TestLeaseRenewalIgnoresTheLocalClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		skew time.Duration // the server's clock minus the local one
	}{
		{"the local clock an hour ahead", -time.Hour},
		{"the local clock an hour behind", time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const ttl = 300 * time.Millisecond
			expires := func() string { return time.Now().Add(tc.skew + ttl).UTC().Format(time.RFC3339Nano) }
			renewals := make(chan struct{}, 100)
			api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				switch r.URL.Path {
				case "/v1/check":
					_, _ = io.WriteString(w, `{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"rules":[],"lease_id":"l1","lease_expires_at":"`+expires()+`","lease_ttl_ms":300}`)
				case "/v1/renew":
					_, _ = io.WriteString(w, `{"lease_id":"l1","expires_at":"`+expires()+`","ttl_ms":300}`)
					renewals <- struct{}{}
				case "/v1/release":
					_, _ = io.WriteString(w, `{"lease_id":"l1","released":true}`)
				}
			}))
			defer api.Close()
			c := newClient(t, api.URL, client.Options{})
			req := httptest.NewRequest(http.MethodGet, "/v1/models", nil)
			req.Header.Set("Authorization", "Bearer tg_x")
			c.Middleware(client.MiddlewareOptions{})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				for range 3 { // the lease outlives three TTLs, renewed each time
					receive(t, renewals, 5*time.Second, "the lease was not renewed")
				}
			})).ServeHTTP(httptest.NewRecorder(), req)
		})
	}
}

// postAs POSTs an empty body to url with key as its bearer token, and
// returns the answer's status and body.
func postAs(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, string(body)
}
