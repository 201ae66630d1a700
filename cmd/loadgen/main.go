// Command loadgen drives POST /v1/check with N concurrent clients for a
// bounded time and reports checks/s and latency percentiles. It is a
// measuring tool for servers you run yourself (loopback by default).
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
	allowRemote := fs.Bool("allow-remote", false, "allow a target that is not a loopback address")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
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
	res := drive(ctx, *target+"/v1/check", *token, bodies, *clients, *duration, *maxRequests)
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

func drive(ctx context.Context, endpoint, token string, bodies []string, clients int, d time.Duration, limit int64) result {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt)
	defer stop()
	transport := &http.Transport{MaxIdleConnsPerHost: clients, MaxConnsPerHost: clients, IdleConnTimeout: time.Minute}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	var (
		sent                            atomic.Int64
		allowed, denied, errs, requests atomic.Int64
		mu                              sync.Mutex
		all                             []time.Duration
		wg                              sync.WaitGroup
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
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(bodies[i%len(bodies)]))
				req.Header.Set("Authorization", "Bearer "+token)
				req.Header.Set("Content-Type", "application/json")
				t0 := time.Now()
				resp, err := client.Do(req)
				if err != nil {
					if ctx.Err() == nil {
						errs.Add(1)
					}
					continue
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				local = append(local, time.Since(t0))
				requests.Add(1)
				switch {
				case resp.StatusCode != http.StatusOK:
					errs.Add(1)
				case strings.Contains(string(body), `"allowed":true`):
					allowed.Add(1)
				default:
					denied.Add(1)
				}
			}
			mu.Lock()
			all = append(all, local...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	slices.Sort(all)
	return result{Requests: requests.Load(), Allowed: allowed.Load(), Denied: denied.Load(), Errors: errs.Load(),
		Elapsed: time.Since(started), Latencies: all}
}

func report(w io.Writer, r result, clients int) {
	rate := float64(r.Requests) / r.Elapsed.Seconds()
	fmt.Fprintf(w, "clients=%d requests=%d elapsed=%s checks/s=%.0f allowed=%d denied=%d errors=%d\n",
		clients, r.Requests, r.Elapsed.Round(time.Millisecond), rate, r.Allowed, r.Denied, r.Errors)
	fmt.Fprintf(w, "latency p50=%s p90=%s p99=%s max=%s\n", r.percentile(.5).Round(time.Microsecond),
		r.percentile(.9).Round(time.Microsecond), r.percentile(.99).Round(time.Microsecond), r.percentile(1).Round(time.Microsecond))
}
