package client

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
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

// MaxMemoryAge bounds how long a Client remembers a denial, whatever the
// wait the server gave. Some waits are upper bounds that something else
// can cut short: a monthly quota's or a spend cap's runs to the month's
// end, yet a plan upgrade, a raised cap or a settlement in another
// process may admit the request any time. Past MaxMemoryAge the
// client asks again, so such a change is seen within it: the same bound
// the check API puts on the denials it remembers itself (maxDenialLife in
// internal/enforce), and the time a revoked key takes to be refused. A
// caller that keeps being denied costs one check a second per request
// and client.
const MaxMemoryAge = time.Second

// concurrency is the algorithm of concurrency rules (RuleResult.Algorithm).
const concurrency = "concurrency"

// remembers reports whether d, the server's answer, is a denial to
// remember: a rate decision (rate_limited or spend_cap) with a positive
// wait. Not remembered:
//   - a denial by a concurrency rule: its wait is when a lease expires at
//     the latest, but any request in flight that ends frees a slot, in
//     this process (Release) or another, so the wait is no lower bound;
//     the check API never denies such rules locally either;
//   - a degraded or unavailable answer: a rule could not be evaluated,
//     and only a check tells when the limiter is back;
//   - credits_exhausted (a wait of -1, until a top-up), a key or tenant
//     refused (no wait), and any reason this client does not know.
//
// A monthly quota (rate_limited) and a spend cap (spend_cap) are
// remembered like other rate decisions: their wait runs to the month's
// end, but MaxMemoryAge bounds the memory, and the client's own
// settlements forget them at once (denials.givenBack).
func remembers(d *Decision) bool {
	if d.Allowed || d.RetryAfterMS <= 0 || d.Degraded {
		return false
	}
	if d.Reason != ReasonRateLimited && d.Reason != ReasonSpendCap {
		return false
	}
	for i := range d.Rules {
		if r := &d.Rules[i]; !r.Allowed && r.Algorithm == concurrency {
			return false
		}
	}
	return true
}

// ownerTag returns the tag of whose units a check counts: its tenant
// (tenantID, from the decision), else its API key, else its address,
// hashed to a byte. Units given back (a settlement, a release) may admit
// any request of the same tenant, not only of the same key, since rules
// may count per tenant; tags that collide only forget more.
func ownerTag(tenantID, apiKey, ip string) uint8 {
	s := tenantID
	if s == "" {
		s = apiKey
	}
	if s == "" {
		s = ip
	}
	h := uint32(2166136261) // FNV-1a
	for i := 0; i < len(s); i++ {
		h = (h ^ uint32(s[i])) * 16777619
	}
	return uint8(h ^ h>>8 ^ h>>16 ^ h>>24)
}

// denials remembers recent denials until their wait or MaxMemoryAge has
// passed, at most size of them, least recently used out first, and
// forgets those of an owner this client gave units back to. It is safe
// for concurrent use.
type denials struct {
	size int
	// givenBacks counts the give-backs of this client (settlements and
	// releases); a check reads it before it is sent.
	givenBacks atomic.Uint64

	mu      sync.Mutex
	entries map[denialKey]*list.Element // of *denial
	order   *list.List                  // front: most recently used
	// givenAt is, per owner tag, the count of the last give-back under
	// it, and givenAll that of the last one whose owner is not known: a
	// denial learned from a check sent before it is stale.
	givenAt  [256]uint64
	givenAll uint64
	// grants maps the hold and lease IDs this client's admitted checks
	// were given to the owner tag of those checks, until settled or
	// released; at most size of them (an ID forgotten, or never seen,
	// forgets every owner's denials when given back).
	grants map[string]uint8
}

type denial struct {
	key     denialKey
	owner   uint8     // ownerTag of the check
	sentGen uint64    // givenBacks when the check was sent
	askedAt time.Time // when the request that was denied was sent
	until   time.Time // askedAt + the wait the server gave
	// expires is when the denial is forgotten: until, or askedAt +
	// MaxMemoryAge if sooner.
	expires  time.Time
	decision Decision
}

func newDenials(size int) *denials {
	return &denials{size: size, entries: make(map[denialKey]*list.Element), order: list.New(), grants: make(map[string]uint8)}
}

// sent returns what a check about to be sent passes to remember as
// sentGen.
func (m *denials) sent() uint64 { return m.givenBacks.Load() }

// remember records d, the answer to a check of owner sent at askedAt,
// when sent() was sentGen. Counting the wait from the sending, not from
// the answer, means the request is never denied locally for longer than
// the server said.
func (m *denials) remember(k denialKey, owner uint8, d *Decision, askedAt time.Time, sentGen uint64) {
	until := askedAt.Add(time.Duration(d.RetryAfterMS) * time.Millisecond)
	expires := askedAt.Add(MaxMemoryAge)
	if until.Before(expires) {
		expires = until
	}
	e := &denial{key: k, owner: owner, sentGen: sentGen, askedAt: askedAt, until: until, expires: expires, decision: *d}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stale(e) {
		return // units were given back while the check was under way
	}
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

// stale reports whether e was learned before a give-back of its owner;
// m.mu is held.
func (m *denials) stale(e *denial) bool {
	return max(m.givenAt[e.owner], m.givenAll) > e.sentGen
}

// lookup returns the remembered denial of k as of now, its waits
// shortened by the time that has passed, or false when there is none,
// it has expired, or units were given back to its owner since.
func (m *denials) lookup(k denialKey, now time.Time) (*Decision, bool) {
	m.mu.Lock()
	el, ok := m.entries[k]
	if !ok {
		m.mu.Unlock()
		return nil, false
	}
	e := el.Value.(*denial)
	if !now.Before(e.expires) || m.stale(e) {
		m.order.Remove(el)
		delete(m.entries, k)
		m.mu.Unlock()
		return nil, false
	}
	m.order.MoveToFront(el)
	m.mu.Unlock()
	return e.at(now), true
}

// granted notes that an admitted check of owner was given holdID and
// leaseID (either may be empty, or both the same ID).
func (m *denials) granted(owner uint8, holdID, leaseID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range [2]string{holdID, leaseID} {
		if id == "" {
			continue
		}
		if _, ok := m.grants[id]; !ok && len(m.grants) >= m.size {
			for old := range m.grants { // any one: the map's order is random
				delete(m.grants, old)
				break
			}
		}
		m.grants[id] = owner
	}
}

// givenBack forgets the denials of the owner of hold or lease id, which
// this client settled or released (whether or not the server did: it
// may have, and asking again is always safe), or every denial when id
// was not granted to this client or is forgotten.
func (m *denials) givenBack(id string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := m.givenBacks.Add(1)
	owner, ok := m.grants[id]
	if !ok {
		m.givenAll = n
		return
	}
	delete(m.grants, id)
	m.givenAt[owner] = n
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
