package client

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// denialKey identifies a request exactly: a digest of its key, address,
// resource and cost. The address is part of it even with a key, because a
// plan may have per-address rules; a digest keeps API keys out of memory.
type denialKey [sha256.Size]byte

func newDenialKey(r CheckRequest) denialKey {
	h := sha256.New()
	resource := r.Resource
	if resource == "" {
		resource = "*"
	}
	for _, s := range []string{r.Key, r.IP, resource} {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write(n[:])
		h.Write([]byte(s))
	}
	var c [8]byte
	binary.BigEndian.PutUint64(c[:], uint64(r.effectiveCost()))
	h.Write(c[:])
	var k denialKey
	h.Sum(k[:0])
	return k
}

// denials remembers recent denials until their wait has passed, at most
// size of them, least recently used out first. It is safe for concurrent
// use.
type denials struct {
	size int

	mu      sync.Mutex
	entries map[denialKey]*list.Element // of *denial
	order   *list.List                  // front: most recently used
}

type denial struct {
	key      denialKey
	askedAt  time.Time // when the request that was denied was sent
	until    time.Time // askedAt + the wait the server gave
	decision Decision
}

func newDenials(size int) *denials {
	return &denials{size: size, entries: make(map[denialKey]*list.Element), order: list.New()}
}

// remember records d, the answer to a request sent at askedAt. Counting
// the wait from the sending, not from the answer, means the request is
// never denied locally for longer than the server said.
func (m *denials) remember(k denialKey, d *Decision, askedAt time.Time) {
	e := &denial{key: k, askedAt: askedAt, until: askedAt.Add(time.Duration(d.RetryAfterMS) * time.Millisecond), decision: *d}
	m.mu.Lock()
	defer m.mu.Unlock()
	if el, ok := m.entries[k]; ok {
		el.Value = e
		m.order.MoveToFront(el)
		return
	}
	for m.order.Len() >= m.size {
		oldest := m.order.Back()
		m.order.Remove(oldest)
		delete(m.entries, oldest.Value.(*denial).key)
	}
	m.entries[k] = m.order.PushFront(e)
}

// lookup returns the remembered denial of k as of now, its waits shortened
// by the time that has passed, or false when there is none or its wait has
// passed.
func (m *denials) lookup(k denialKey, now time.Time) (*Decision, bool) {
	m.mu.Lock()
	el, ok := m.entries[k]
	if !ok {
		m.mu.Unlock()
		return nil, false
	}
	e := el.Value.(*denial)
	if !now.Before(e.until) {
		m.order.Remove(el)
		delete(m.entries, k)
		m.mu.Unlock()
		return nil, false
	}
	m.order.MoveToFront(el)
	m.mu.Unlock()
	return e.at(now), true
}

// len returns how many denials are remembered.
func (m *denials) len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.order.Len()
}

// at returns the remembered decision as it stands at now (before until).
func (e *denial) at(now time.Time) *Decision {
	elapsedMS := now.Sub(e.askedAt).Milliseconds()
	d := e.decision
	d.Remembered = true
	d.RetryAfterMS = ceilMS(e.until.Sub(now))
	d.ResetAfterMS = shorten(d.ResetAfterMS, elapsedMS)
	d.Rules = make([]RuleResult, len(e.decision.Rules))
	for i, r := range e.decision.Rules {
		r.ResetAfterMS = shorten(r.ResetAfterMS, elapsedMS)
		r.RetryAfterMS = shorten(r.RetryAfterMS, elapsedMS)
		d.Rules[i] = r
	}
	d.Header = e.decision.Header.Clone()
	if d.Header == nil {
		d.Header = http.Header{}
	}
	d.Header.Set("Retry-After", strconv.FormatInt(ceilDiv(d.RetryAfterMS, 1000), 10))
	if v := d.Header.Get("RateLimit"); v != "" && d.Policy != "" {
		d.Header.Set("RateLimit", withReset(v, ceilDiv(d.ResetAfterMS, 1000)))
	}
	return &d
}

// shorten subtracts elapsed from a positive wait, down to 0; 0 and -1
// ("never") stay as they are.
func shorten(ms, elapsed int64) int64 {
	if ms <= 0 {
		return ms
	}
	return max(0, ms-elapsed)
}

// ceilMS returns d in milliseconds, rounded up.
func ceilMS(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

func ceilDiv(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

// withReset sets the t (seconds until reset) parameter of a RateLimit
// header value such as `"hourly";r=0;t=3`.
func withReset(v string, seconds int64) string {
	parts := strings.Split(v, ";")
	for i, p := range parts {
		if strings.HasPrefix(strings.TrimSpace(p), "t=") {
			parts[i] = "t=" + strconv.FormatInt(seconds, 10)
			return strings.Join(parts, ";")
		}
	}
	return v
}
