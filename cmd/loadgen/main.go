// Command loadgen drives POST /v1/check with N concurrent clients for a
// bounded time and reports checks/s and latency percentiles. It is a
// measuring tool for servers you run yourself (loopback by default).
//
// Two modes besides the default closed loop (each client sends its next
// check when the last one is answered):
//
//   - -rate R offers R checks per second at a constant rate whatever the
//     server does (an open loop, at most -c in flight), and measures each
//     latency from when the check was due, not from when a client was
//     free to send it: a server that falls behind shows the queueing its
//     callers would see.
//   - -floor ADDR serves a no-op JSON handler on ADDR instead of sending
//     load: the floor that scripts/bench-http.sh compares the api to.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

func main() {
	if err := run(context.Background(), os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

// result is what one run measured.
type result struct {
	Requests, Allowed, Denied, Errors int64
	Elapsed                           time.Duration
	Latencies                         []time.Duration
}

func (r result) percentile(p float64) time.Duration {
	if len(r.Latencies) == 0 {
		return 0
	}
	i := int(float64(len(r.Latencies)-1) * p)
	return r.Latencies[i]
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	target := fs.String("url", "http://127.0.0.1:8080", "check API base URL")
	token := fs.String("token", getenv("TOLLGATE_TOKEN"), "service token (default $TOLLGATE_TOKEN)")
	keys := fs.String("keys", "", "comma-separated API keys to spread checks over; empty = anonymous callers")
	ips := fs.Int("ips", 10000, "distinct anonymous IPs to spread checks over (without -keys)")
	resource := fs.String("resource", "GET /repos", "resource of every check")
	clients := fs.Int("c", 64, "concurrent clients")
	duration := fs.Duration("d", 10*time.Second, "how long to run (at most 10m)")
	maxRequests := fs.Int64("n", 0, "stop after this many requests (0 = no limit)")
	rate := fs.Float64("rate", 0, "offer this many checks per second at a constant rate (0 = closed loop: each client sends when answered)")
	floor := fs.String("floor", "", "serve the no-op floor handler on this address instead of sending load")
	allowRemote := fs.Bool("allow-remote", false, "allow a target that is not a loopback address")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *floor != "" {
		return serveFloor(ctx, *floor, stdout)
	}
	u, err := url.Parse(*target)
	if err != nil {
		return fmt.Errorf("-url: %w", err)
	}
	if !*allowRemote && !isLoopback(u.Hostname()) {
		return fmt.Errorf("-url %s is not a loopback address; pass -allow-remote to load a server you own elsewhere", *target)
	}
	if *clients < 1 || *duration <= 0 || *duration > 10*time.Minute {
		return errors.New("-c must be ≥ 1 and -d between 0 and 10m")
	}
	if *rate < 0 || *rate > 1e6 {
		return errors.New("-rate must be between 0 and 1000000")
	}
	var bodies []string
	if *keys != "" {
		for _, k := range strings.Split(*keys, ",") {
			bodies = append(bodies, fmt.Sprintf(`{"key":%q,"resource":%q}`, strings.TrimSpace(k), *resource))
		}
	} else {
		for i := range max(*ips, 1) {
			bodies = append(bodies, fmt.Sprintf(`{"ip":"10.%d.%d.%d","resource":%q}`, i>>16&255, i>>8&255, i&255, *resource))
		}
	}
	var res result
	if *rate > 0 {
		res = driveRate(ctx, *target+"/v1/check", *token, bodies, *clients, *rate, *duration, *maxRequests)
	} else {
		res = drive(ctx, *target+"/v1/check", *token, bodies, *clients, *duration, *maxRequests)
	}
	report(stdout, res, *clients)
	if res.Requests == 0 {
		return errors.New("no request succeeded")
	}
	return nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// sender sends checks and counts their answers; safe for concurrent use.
type sender struct {
	endpoint, token string
	client          *http.Client

	allowed, denied, errs, requests atomic.Int64
	mu                              sync.Mutex
	all                             []time.Duration
}

func newSender(endpoint, token string, clients int) *sender {
	transport := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, IdleConnTimeout: time.Minute}
	return &sender{endpoint: endpoint, token: token, client: &http.Client{Transport: transport, Timeout: 10 * time.Second}}
}

// send posts body and returns when it was answered, false when it failed.
func (s *sender) send(ctx context.Context, body string) (time.Time, bool) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+s.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		if ctx.Err() == nil {
			s.errs.Add(1)
		}
		return time.Time{}, false
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	done := time.Now()
	s.requests.Add(1)
	switch {
	case resp.StatusCode != http.StatusOK:
		s.errs.Add(1)
	case strings.Contains(string(answer), `"allowed":true`):
		s.allowed.Add(1)
	default:
		s.denied.Add(1)
	}
	return done, true
}

func (s *sender) keep(local []time.Duration) {
	s.mu.Lock()
	s.all = append(s.all, local...)
	s.mu.Unlock()
}

func (s *sender) result(elapsed time.Duration) result {
	slices.Sort(s.all)
	return result{Requests: s.requests.Load(), Allowed: s.allowed.Load(), Denied: s.denied.Load(), Errors: s.errs.Load(),
		Elapsed: elapsed, Latencies: s.all}
}

// drive runs a closed loop: each of clients sends its next check when the
// last one is answered.
func drive(ctx context.Context, endpoint, token string, bodies []string, clients int, d time.Duration, limit int64) result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	s := newSender(endpoint, token, clients)
	var (
		sent atomic.Int64
		wg   sync.WaitGroup
	)
	started := time.Now()
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1<<14)
			for i := c; ctx.Err() == nil; i += clients {
				if limit > 0 && sent.Add(1) > limit {
					break
				}
				t0 := time.Now()
				if done, ok := s.send(ctx, bodies[i%len(bodies)]); ok {
					local = append(local, done.Sub(t0))
				}
			}
			s.keep(local)
		}()
	}
	wg.Wait()
	return s.result(time.Since(started))
}

// driveRate runs an open loop: check i is due at start + i/rate, whatever
// became of the ones before; at most clients are in flight. A latency is
// measured from when its check was due, so waiting for a free client
// counts (no coordinated omission).
func driveRate(ctx context.Context, endpoint, token string, bodies []string, clients int, rate float64, d time.Duration, limit int64) result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	s := newSender(endpoint, token, clients)
	type job struct {
		due  time.Time
		body string
	}
	// Due checks wait here for a client; a full queue means the server is
	// hopelessly behind, and the due times still count the wait.
	jobs := make(chan job, 1<<16)
	var wg sync.WaitGroup
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := make([]time.Duration, 0, 1<<14)
			for j := range jobs {
				if ctx.Err() != nil {
					continue // drain
				}
				if done, ok := s.send(ctx, j.body); ok {
					local = append(local, done.Sub(j.due))
				}
			}
			s.keep(local)
		}()
	}
	interval := time.Duration(float64(time.Second) / rate)
	started := time.Now()
	for i := int64(0); limit == 0 || i < limit; i++ {
		due := started.Add(time.Duration(i) * interval)
		if wait := time.Until(due); wait > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
		}
		if ctx.Err() != nil {
			break
		}
		select {
		case jobs <- job{due: due, body: bodies[int(i)%len(bodies)]}:
		case <-ctx.Done():
		}
	}
	close(jobs)
	wg.Wait()
	return s.result(time.Since(started))
}

// serveFloor serves the floor until ctx ends or SIGINT/SIGTERM: the
// cheapest JSON handler Go's net/http allows — it reads the body and
// answers a fixed JSON object — so that a check server's figures can be
// read as a fraction of what the machine can do at all.
func serveFloor(ctx context.Context, addr string, stdout io.Writer) error {
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("-floor: %w", err)
	}
	answer := []byte(`{"allowed":true,"reason":"ok"}` + "\n")
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(answer)
	})}
	fmt.Fprintf(stdout, "floor listening on %s\n", ln.Addr())
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func report(w io.Writer, r result, clients int) {
	rate := float64(r.Requests) / r.Elapsed.Seconds()
	fmt.Fprintf(w, "clients=%d requests=%d elapsed=%s checks/s=%.0f allowed=%d denied=%d errors=%d\n",
		clients, r.Requests, r.Elapsed.Round(time.Millisecond), rate, r.Allowed, r.Denied, r.Errors)
	fmt.Fprintf(w, "latency p50=%s p90=%s p99=%s max=%s\n", r.percentile(.5).Round(time.Microsecond),
		r.percentile(.9).Round(time.Microsecond), r.percentile(.99).Round(time.Microsecond), r.percentile(1).Round(time.Microsecond))
	// The same figures for scripts (scripts/bench-http.sh), in the form
	// scripts/wrk-check.lua prints them.
	fmt.Fprintf(w, "RESULT requests=%d seconds=%.3f rps=%.0f p50_us=%d p90_us=%d p99_us=%d max_us=%d allowed=%d denied=%d errors=%d\n",
		r.Requests, r.Elapsed.Seconds(), rate, r.percentile(.5).Microseconds(), r.percentile(.9).Microseconds(),
		r.percentile(.99).Microseconds(), r.percentile(1).Microseconds(), r.Allowed, r.Denied, r.Errors)
}
