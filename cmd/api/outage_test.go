package main

import (
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testenv"
)

// The paths a gateway under test protects: failClosedPath's location
// fails closed when Tollgate cannot be asked, failOpenPath's fails open.
// Both reach the upstream.
const (
	failClosedPath = "/repos"
	failOpenPath   = "/open/repos"
)

// startGateway runs a gateway in front of app, asking the check API at
// api with the service token, and returns its base URL.
type startGateway func(t *testing.T, api, app, token string) string

// outageSample is one request sent through a gateway while the check API
// was stopped and started again.
type outageSample struct {
	start, end time.Time
	path       string
	probe      bool // from a client whose allowance is used up
	status     int
	header     http.Header
	err        error
}

// testGatewayOutage stops the check API behind a gateway under a few
// hundred requests a second and starts it again on the same address: no
// request may get a 500; while it is down the fail-open location lets
// requests through to the upstream marked X-Tollgate-Degraded and the
// fail-closed one answers 503 problem+json with Retry-After; from 1 s
// after it is back every decision is enforced again (a client whose
// allowance is used up gets its 429, a client's own X-Tollgate-Degraded
// never reaches the upstream).
func testGatewayOutage(t *testing.T, start startGateway) {
	f := newFixture(t)
	apiAddr := testenv.FreeAddr(t)
	env := map[string]string{"TOLLGATE_API_ADDR": apiAddr}
	addrs, stop := f.startAPIStoppable(t, env)
	app := newUpstream(t)
	gw := start(t, addrs[0], app.URL, f.token)

	// The probe client's anonymous allowance (60 an hour) is used up.
	probe := clientFrom("127.0.0.9")
	for i := range 60 {
		if r := through(t, probe, "GET", gw+failClosedPath, nil); r.status != http.StatusOK {
			t.Fatalf("probe %d: %d %q", i+1, r.status, r.body)
		}
	}

	var (
		mu      sync.Mutex
		samples []outageSample
		wg      sync.WaitGroup
	)
	pro := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	send := func(c *http.Client, path string, isProbe bool) {
		defer wg.Done()
		s := outageSample{start: time.Now(), path: path, probe: isProbe}
		req, _ := http.NewRequest("GET", gw+path, nil)
		req.Header.Set("X-Tollgate-Degraded", "true") // forged: must never reach the upstream
		if !isProbe {
			req.Header.Set("X-API-Key", f.keys["pro"])
		}
		resp, err := c.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			s.status, s.header = resp.StatusCode, resp.Header
		}
		s.end, s.err = time.Now(), err
		mu.Lock()
		samples = append(samples, s)
		mu.Unlock()
	}
	// About 300 requests a second, fail-open and fail-closed in turn, one
	// in ten from the probe client.
	done := make(chan struct{})
	var loadWG sync.WaitGroup
	loadWG.Add(1)
	go func() {
		defer loadWG.Done()
		tick := time.NewTicker(3 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			path := []string{failClosedPath, failOpenPath}[i%2]
			wg.Add(1)
			if i%10 < 2 {
				go send(probe, path, true)
			} else {
				go send(pro, path, false)
			}
		}
	}()

	// Each phase lasts until the load has sent what the checks below
	// count in it: at least 10 requests of each location answered before
	// the stop, 50 sent and answered while the api is down, and 50 sent
	// from 1 s after it is back (the contract's bound) and answered.
	answered := func(from time.Time) (n [2]int) { // by fail-closed, fail-open
		mu.Lock()
		defer mu.Unlock()
		for _, s := range samples {
			if s.start.Before(from) {
				continue
			}
			if s.path == failOpenPath {
				n[1]++
			} else {
				n[0]++
			}
		}
		return n
	}
	phase := func(what string, from time.Time, want int) {
		t.Helper()
		testenv.Eventually(t, time.Now(), 30*time.Second, what, func() (bool, string) {
			n := answered(from)
			return n[0] >= want && n[1] >= want, fmt.Sprintf("fail-closed, fail-open: %v answered", n)
		})
	}
	phase("requests answered before the stop", time.Time{}, 10)
	stopAt := time.Now()
	if err := stop(); err != nil {
		t.Errorf("api run: %v", err)
	}
	downAt := time.Now()
	phase("requests answered while the api is down", downAt, 50)
	addrs, stop = f.startAPIStoppable(t, env)
	upAt := time.Now()
	phase("requests answered from 1 s after the restart", upAt.Add(time.Second), 50)
	close(done)
	loadWG.Wait()
	wg.Wait()

	var down, after, before [2]int // by fail-closed, fail-open
	for _, s := range samples {
		what := fmt.Sprintf("GET %s (probe %v, %v after the stop)", s.path, s.probe, s.start.Sub(stopAt).Round(time.Millisecond))
		if s.err != nil {
			t.Errorf("%s: %v", what, s.err)
			continue
		}
		if s.status == http.StatusInternalServerError {
			t.Errorf("%s: 500 %s", what, s.header.Get("Content-Type"))
			continue
		}
		open := 0
		if s.path == failOpenPath {
			open = 1
		}
		switch {
		case !s.start.Before(downAt) && s.end.Before(upAt):
			down[open]++
			if open == 1 {
				if s.status != http.StatusOK || s.header.Get("X-Seen-Degraded") != "true" {
					t.Errorf("%s while down: %d, upstream saw X-Tollgate-Degraded %q; want 200 marked degraded", what, s.status, s.header.Get("X-Seen-Degraded"))
				}
			} else if s.status != http.StatusServiceUnavailable || s.header.Get("Content-Type") != "application/problem+json" ||
				s.header.Get("Retry-After") != "1" {
				t.Errorf("%s while down: %d %q Retry-After %q; want 503 problem+json with Retry-After 1", what, s.status,
					s.header.Get("Content-Type"), s.header.Get("Retry-After"))
			}
		case s.end.Before(stopAt), !s.start.Before(upAt.Add(time.Second)):
			if s.end.Before(stopAt) {
				before[open]++
			} else {
				after[open]++
			}
			want := http.StatusOK
			if s.probe {
				want = http.StatusTooManyRequests
			}
			if s.status != want || s.header.Get("X-Seen-Degraded") != "" {
				t.Errorf("%s with the api up: %d, upstream saw X-Tollgate-Degraded %q; want %d, not degraded", what, s.status,
					s.header.Get("X-Seen-Degraded"), want)
			}
		default: // stopping or starting: any clean answer
			switch s.status {
			case http.StatusOK, http.StatusTooManyRequests, http.StatusServiceUnavailable:
			default:
				t.Errorf("%s: %d", what, s.status)
			}
		}
	}
	t.Logf("%d requests; fail-closed/fail-open: %v before, %v while down, %v from 1 s after the restart", len(samples), before, down, after)
	for i, name := range []string{"fail-closed", "fail-open"} {
		if before[i] < 10 || down[i] < 50 || after[i] < 50 {
			t.Errorf("%s: %d requests before the stop, %d while down, %d from 1 s after the restart; want at least 10, 50, 50",
				name, before[i], down[i], after[i])
		}
	}
}

// TestNginxOutage: the recipe in deploy/nginx when the check API stops.
func TestNginxOutage(t *testing.T) { testGatewayOutage(t, startNginx) }
