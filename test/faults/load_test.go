package faults

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// caller is one source of checks: a key on a fail-open or fail-closed
// plan, an anonymous IP, or a well-formed key that does not exist.
type caller struct {
	name string
	mode string // open, closed, anonymous, unknown
	home int    // the API node it is sent to while that node is up
	body []byte
}

// result is one check as the client saw it.
type result struct {
	caller      int
	node        int // the node that answered (or failed last)
	start, end  time.Time
	status      int // 0: no HTTP answer
	err         error
	rerouted    bool // the home node failed and another answered
	allowed     bool
	degraded    bool
	reason      string
	tenantID    string
	keyID       string
	tier        string
	undecodable bool
}

func (r result) latency() time.Duration { return r.end.Sub(r.start) }

// loadGen sends checks at a fixed rate, whatever the answers' latency
// (an open loop: a slow server does not slow the arrivals), round robin
// over the callers. Like a load balancer, it takes a node that refused a
// connection out of rotation and sends that check to the next node.
type loadGen struct {
	client  *http.Client
	nodes   []string
	down    []atomic.Bool
	token   string
	callers []caller
	rate    int

	inflight chan struct{}
	skipped  atomic.Int64
	stop     chan struct{}
	stopped  chan struct{}
	wg       sync.WaitGroup

	mu      sync.Mutex
	results []result
}

func newLoadGen(nodes []string, token string, callers []caller, rate int) *loadGen {
	return &loadGen{
		client: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
			MaxIdleConnsPerHost: 256, IdleConnTimeout: time.Minute}},
		nodes: nodes, down: make([]atomic.Bool, len(nodes)), token: token, callers: callers, rate: rate,
		inflight: make(chan struct{}, 512), stop: make(chan struct{}), stopped: make(chan struct{}),
	}
}

func (g *loadGen) start() {
	go func() {
		defer close(g.stopped)
		interval := time.Second / time.Duration(g.rate)
		next := time.Now()
		for seq := 0; ; seq++ {
			next = next.Add(interval)
			select {
			case <-g.stop:
				return
			case <-time.After(time.Until(next)):
			}
			c := seq % len(g.callers)
			select {
			case g.inflight <- struct{}{}:
				g.wg.Add(1)
				go func() {
					defer g.wg.Done()
					defer func() { <-g.inflight }()
					g.one(c)
				}()
			default:
				g.skipped.Add(1) // more than 512 in flight: counted, not sent
			}
		}
	}()
}

// finish stops sending and waits for the answers in flight.
func (g *loadGen) finish() {
	close(g.stop)
	<-g.stopped
	g.wg.Wait()
}

func (g *loadGen) one(c int) {
	r := result{caller: c, start: time.Now()}
	home := g.callers[c].home
	for i := range g.nodes {
		node := (home + i) % len(g.nodes)
		if g.down[node].Load() {
			continue
		}
		r.node, r.rerouted = node, i > 0
		err := g.send(&r, node)
		if err == nil {
			break
		}
		r.err = err
		var netErr interface{ Timeout() bool }
		if errors.As(err, &netErr) && netErr.Timeout() {
			break // an answer too slow is a failure, not a dead node
		}
		g.down[node].Store(true) // refused or reset: out of rotation
	}
	r.end = time.Now()
	g.mu.Lock()
	g.results = append(g.results, r)
	g.mu.Unlock()
}

func (g *loadGen) send(r *result, node int) error {
	req, _ := http.NewRequest(http.MethodPost, "http://"+g.nodes[node]+"/v1/check", bytes.NewReader(g.callers[r.caller].body))
	req.Header.Set("Authorization", "Bearer "+g.token)
	res, err := g.client.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	r.err = nil
	r.status = res.StatusCode
	var d struct {
		Allowed  bool   `json:"allowed"`
		Degraded bool   `json:"degraded"`
		Reason   string `json:"reason"`
		TenantID string `json:"tenant_id"`
		KeyID    string `json:"key_id"`
		Tier     string `json:"tier"`
	}
	if json.Unmarshal(raw, &d) != nil {
		r.undecodable = true
	}
	r.allowed, r.degraded, r.reason, r.tenantID, r.keyID, r.tier = d.Allowed, d.Degraded, d.Reason, d.TenantID, d.KeyID, d.Tier
	return nil
}

// snapshot returns a copy of the results so far.
func (g *loadGen) snapshot() []result {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]result(nil), g.results...)
}

// latencies summarises the latency of the results that match keep.
type latencies struct {
	n             int
	p50, p99, max time.Duration
}

func summarise(rs []result, keep func(result) bool) latencies {
	var ds []time.Duration
	for _, r := range rs {
		if keep(r) && r.status != 0 {
			ds = append(ds, r.latency())
		}
	}
	if len(ds) == 0 {
		return latencies{}
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	at := func(q float64) time.Duration { return ds[min(len(ds)-1, int(q*float64(len(ds))))] }
	return latencies{n: len(ds), p50: at(0.50), p99: at(0.99), max: ds[len(ds)-1]}
}

func (l latencies) String() string {
	ms := func(d time.Duration) string {
		return time.Duration(d.Microseconds() * 1000).Round(10 * time.Microsecond).String()
	}
	if l.n == 0 {
		return "no answers"
	}
	return "n=" + strconv.Itoa(l.n) + " p50=" + ms(l.p50) + " p99=" + ms(l.p99) + " max=" + ms(l.max)
}
