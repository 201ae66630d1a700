package metering

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/testenv"
)

// memProducer keeps published batches; it fails while failing > 0.
type memProducer struct {
	mu      sync.Mutex
	batches []Batch
	failing int
	calls   []string // batch IDs of every attempt
}

func (p *memProducer) Publish(_ context.Context, b Batch) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, b.ID)
	if p.failing > 0 {
		p.failing--
		return errors.New("store down")
	}
	// Round-trip the wire form, as a real producer does.
	data, err := b.Encode()
	if err != nil {
		return err
	}
	decoded, err := DecodeBatch(data)
	if err != nil {
		return err
	}
	p.batches = append(p.batches, decoded)
	return nil
}

// totals sums published rows by tenant/key.
func (p *memProducer) totals() map[string]Counts {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := map[string]Counts{}
	for _, b := range p.batches {
		for _, r := range b.Rows {
			c := out[r.TenantID+"/"+r.KeyID]
			c.Add(r.Counts)
			out[r.TenantID+"/"+r.KeyID] = c
		}
	}
	return out
}

const t0 = int64(1_790_812_800_000_000) // 2026-10-01T00:00:00Z in µs

// testID returns a UUID that reads as n.
func testID(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

var (
	tA, tB     = testID(1), testID(2)
	kA, kB, kC = testID(11), testID(12), testID(13)
)

func event(atUS int64, tenant, key, resource string, allowed bool, cost int64, denied ...string) tollgate.UsageEvent {
	ev := tollgate.UsageEvent{AtUS: atUS, TenantID: tenant, KeyID: key, Tier: tollgate.TierAuthenticated,
		Resource: resource, Cost: cost, Allowed: allowed, Reason: tollgate.ReasonOK, Denied: denied}
	if !allowed {
		ev.Reason = tollgate.ReasonRateLimited
	}
	return ev
}

func TestAggregatorSumsByMinuteAndDimensions(t *testing.T) {
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, ProducerID: "p1"})
	a.Record(event(t0, tA, kA, "GET /a", true, 2))
	a.Record(event(t0+59_999_999, tA, kA, "GET /a", true, 3)) // same minute
	a.Record(event(t0+60_000_000, tA, kA, "GET /a", true, 1)) // next minute
	a.Record(event(t0, tA, kA, "GET /a", false, 5, "hourly"))
	a.Record(event(t0, tA, kA, "GET /a", false, 1, "hourly", "search"))
	a.Record(event(t0, tA, kB, "GET /b", true, 0))
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(p.batches) != 1 {
		t.Fatalf("got %d batches, want 1", len(p.batches))
	}
	b := p.batches[0]
	if b.ID != "p1:1" {
		t.Errorf("batch ID %q, want p1:1", b.ID)
	}
	got := map[string]Counts{}
	for _, r := range b.Rows {
		got[fmt.Sprintf("%d %s %s %s %s %s", r.Minute, map[string]string{kA: "k1", kB: "k2"}[r.KeyID], r.Resource, r.Reason, r.DeniedBy, r.Tier)] = r.Counts
	}
	m0, m1 := t0/1_000_000, t0/1_000_000+60
	want := map[string]Counts{
		fmt.Sprintf("%d k1 GET /a ok  authenticated", m0):                        {Allowed: 2, AllowedUnits: 5},
		fmt.Sprintf("%d k1 GET /a ok  authenticated", m1):                        {Allowed: 1, AllowedUnits: 1},
		fmt.Sprintf("%d k1 GET /a rate_limited hourly authenticated", m0):        {Denied: 1, DeniedUnits: 5},
		fmt.Sprintf("%d k1 GET /a rate_limited hourly,search authenticated", m0): {Denied: 1, DeniedUnits: 1},
		fmt.Sprintf("%d k2 GET /b ok  authenticated", m0):                        {Allowed: 1},
	}
	if len(got) != len(want) {
		t.Errorf("got %d rows, want %d: %v", len(got), len(want), got)
	}
	for k, w := range want {
		if got[k] != w {
			t.Errorf("row %q: got %+v, want %+v", k, got[k], w)
		}
	}
	// Nothing recorded since: no empty batch.
	if err := a.Flush(context.Background()); err != nil || len(p.batches) != 1 {
		t.Errorf("empty flush: err %v, %d batches; want nil, 1", err, len(p.batches))
	}
}

func TestAggregatorRetriesFailedBatchWithSameID(t *testing.T) {
	p := &memProducer{failing: 3}
	a := NewAggregator(AggregatorConfig{Producer: p, ProducerID: "p"})
	ctx := context.Background()
	want := Counts{}
	for i := range 4 {
		for j := range 10 {
			allowed := j%3 != 0
			ev := event(t0+int64(i)*61_000_000, tA, kA, "*", allowed, int64(j))
			a.Record(ev)
			if allowed {
				want.Add(Counts{Allowed: 1, AllowedUnits: int64(j)})
			} else {
				want.Add(Counts{Denied: 1, DeniedUnits: int64(j)})
			}
		}
		_ = a.Flush(ctx) // fails three times, then publishes the old batch and a new one
	}
	if got := p.totals()[tA+"/"+kA]; got != want {
		t.Errorf("published %+v, want %+v", got, want)
	}
	// The failed batch was retried under its own ID; then one new batch.
	wantCalls := []string{"p:1", "p:1", "p:1", "p:1", "p:2"}
	if fmt.Sprint(p.calls) != fmt.Sprint(wantCalls) {
		t.Errorf("publish attempts %v, want %v", p.calls, wantCalls)
	}
	s := a.Stats()
	if s.Recorded != 40 || s.PublishedDecisions != 40 || s.PublishErrors != 3 || s.Dropped != 0 {
		t.Errorf("stats %+v", s)
	}
	if n := a.pendingDecisions(); n != 0 {
		t.Errorf("pending %d, want 0", n)
	}
}

func TestAggregatorBoundsMemory(t *testing.T) {
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, MaxRows: 8})
	for i := range 100 {
		a.Record(event(t0, tA, kA, fmt.Sprintf("GET /%d", i), true, 1))
	}
	// New keys past the bound: the first gets a row without its resource
	// (the 10th, 8 × 5/4); the rest fold into one row of the tenant's hour
	// without key or resource (the 11th).
	for i := range 100 {
		a.Record(event(t0, tA, testID(100+i), "GET /x", true, 1))
	}
	// New tenants past that: the first takes the last row (8 × 3/2), the
	// other 99 are dropped.
	for i := range 100 {
		a.Record(event(t0, testID(300+i), testID(400+i), "GET /x", true, 1))
	}
	s := a.Stats()
	if s.Recorded != 300 {
		t.Errorf("recorded %d, want 300", s.Recorded)
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var published int64
	rows := 0
	for _, b := range p.batches {
		rows += len(b.Rows)
		for _, r := range b.Rows {
			published += r.Decisions()
		}
	}
	if rows != 12 {
		t.Errorf("%d rows held, want 12", rows)
	}
	s = a.Stats()
	if published+s.Dropped != 300 {
		t.Errorf("published %d + dropped %d, want 300", published, s.Dropped)
	}
	if s.Dropped != 99 || s.Folded != 193 {
		t.Errorf("dropped %d, folded %d; want 99, 193", s.Dropped, s.Folded)
	}
	totals := p.totals()
	if got := totals[tA+"/"+kA]; got.Allowed != 100 {
		t.Errorf("key kA: %d allowed, want all 100 (resource folded, count exact)", got.Allowed)
	}
	var tenantA int64
	for k, c := range totals {
		if strings.HasPrefix(k, tA+"/") {
			tenantA += c.Allowed
		}
	}
	if tenantA != 200 {
		t.Errorf("tenant A: %d allowed, want all 200 (detail folded, billing exact)", tenantA)
	}
}

func TestAggregatorTopIPs(t *testing.T) {
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, TopIPs: 2, MaxIPs: 4})
	anon := func(ip string, n int) {
		for range n {
			a.Record(tollgate.UsageEvent{AtUS: t0, Tier: tollgate.TierAnonymous, IP: ip, Resource: "*", Cost: 1,
				Allowed: true, Reason: tollgate.ReasonOK})
		}
	}
	anon("10.0.0.1", 5)
	anon("10.0.0.2", 7)
	anon("10.0.0.3", 1)
	anon("10.0.0.4", 3)
	anon("10.0.0.5", 2) // past MaxIPs: straight to other
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprint(p.batches[0].IPs)
	m := t0 / 1_000_000
	want := fmt.Sprint([]IPRow{
		{Minute: m, IP: "10.0.0.2", Counts: Counts{Allowed: 7, AllowedUnits: 7}},
		{Minute: m, IP: "10.0.0.1", Counts: Counts{Allowed: 5, AllowedUnits: 5}},
		{Minute: m, IP: OtherIP, Counts: Counts{Allowed: 6, AllowedUnits: 6}},
	})
	if got != want {
		t.Errorf("ip rows\n got %s\nwant %s", got, want)
	}
}

func TestAggregatorCloseCountsWhatItCouldNotPublish(t *testing.T) {
	p := &memProducer{failing: 1 << 30}
	a := NewAggregator(AggregatorConfig{Producer: p, FlushInterval: time.Hour})
	a.Start()
	for range 7 {
		a.Record(event(t0, tA, kA, "*", true, 1))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	err := a.Close(ctx)
	if err == nil {
		t.Fatal("Close succeeded with the producer down")
	}
	if s := a.Stats(); s.Dropped != 7 {
		t.Errorf("dropped %d, want 7", s.Dropped)
	}
}

func TestAggregatorFlushesPeriodicallyAndOnClose(t *testing.T) {
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, FlushInterval: 10 * time.Millisecond})
	a.Start()
	a.Record(event(t0, tA, kA, "*", true, 1))
	testenv.WaitFor(t, 5*time.Second, "a periodic flush", func() bool { return len(p.totals()) > 0 })
	if p.totals()[tA+"/"+kA].Allowed != 1 {
		t.Fatal("the periodic flush did not publish")
	}
	a.Record(event(t0, tA, kA, "*", true, 1))
	if err := a.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.totals()[tA+"/"+kA].Allowed; got != 2 {
		t.Errorf("after Close: %d allowed published, want 2", got)
	}
}

// TestAggregatorFlushesACrossingAtOnce: a check that crossed a quota
// threshold is published at once, with everything recorded before it,
// not at the next tick (an hour away here).
func TestAggregatorFlushesACrossingAtOnce(t *testing.T) {
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, FlushInterval: time.Hour})
	a.Start()
	defer func() { testenv.Must(t, a.Close(context.Background())) }()
	a.Record(event(t0, tA, kA, "*", true, 1))
	crossing := event(t0+1, tA, kA, "*", true, 3)
	crossing.Crossed = []int64{800}
	a.Record(crossing)
	testenv.WaitFor(t, 5*time.Second, "the crossing published", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.batches) > 0
	})
	p.mu.Lock()
	b := p.batches[0]
	p.mu.Unlock()
	if len(b.Crossings) != 1 || b.Crossings[0] != (Crossing{TenantID: tA, Units: 800, AtUS: t0 + 1}) {
		t.Errorf("crossings published %+v, want tenant A's 800", b.Crossings)
	}
	if got := p.totals()[tA+"/"+kA]; got.Allowed != 2 || got.AllowedUnits != 4 {
		t.Errorf("published with the crossing: %+v, want both checks", got)
	}
}

func TestDecodeBatchRejectsInvalid(t *testing.T) {
	for name, payload := range map[string]string{
		"not json":   `{`,
		"no version": `{"id":"x","rows":[]}`,
		"bad tenant": `{"v":1,"id":"x","rows":[{"minute":1790812800,"tenant_id":"nope","tier":"authenticated","resource":"*","reason":"ok"}]}`,
		"bad minute": `{"v":1,"id":"x","rows":[{"minute":1790812801,"tier":"authenticated","resource":"*","reason":"ok"}]}`,
		"negative":   `{"v":1,"id":"x","rows":[{"minute":1790812800,"tier":"authenticated","resource":"*","reason":"ok","allowed":-1}]}`,
		"missing id": `{"v":1,"rows":[]}`,
		"ip no addr": `{"v":1,"id":"x","ips":[{"minute":1790812800}]}`,
	} {
		if _, err := DecodeBatch([]byte(payload)); err == nil {
			t.Errorf("%s: decoded without error", name)
		}
	}
}

func BenchmarkRecord(b *testing.B) {
	a := NewAggregator(AggregatorConfig{Producer: &memProducer{}})
	resources := []string{"GET /repos", "POST /v1/search", "GET /users", "*"}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			i++
			a.Record(event(t0+int64(i%600)*1_000_000, "8a3c6f1e-0000-4000-8000-000000000001",
				"8a3c6f1e-0000-4000-8000-00000000000"+fmt.Sprint(i%8), resources[i%4], i%5 != 0, 1))
		}
	})
}

// TestAggregatorCountsHoldsAtSettlement: a check that opens a hold counts
// as a decision without units; its settlement (or expiry) adds the units
// the hold finally counts, so usage sums settled units only.
func TestAggregatorCountsHoldsAtSettlement(t *testing.T) {
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, ProducerID: "p1"})
	opened := event(t0, tA, kA, "POST /v1/complete", true, 500)
	opened.Hold = tollgate.HoldOpened
	a.Record(opened)
	settled := event(t0+1, tA, kA, "POST /v1/complete", true, 320)
	settled.Hold = tollgate.HoldSettled
	a.Record(settled)
	refunded := event(t0+2, tA, kA, "POST /v1/complete", true, 0)
	refunded.Hold, refunded.Expired = tollgate.HoldSettled, true
	a.Record(refunded)
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var sum Counts
	for _, r := range p.batches[0].Rows {
		sum.Add(r.Counts)
	}
	if want := (Counts{Allowed: 1, AllowedUnits: 320, ExpiredHolds: 1}); sum != want {
		t.Errorf("counted %+v, want %+v", sum, want)
	}
}

// TestAggregatorKeepsSettlementsApart: a settlement under its hold's hash
// goes to the batch's Settlements, once per hold however often it is
// recorded (a retried settlement); one without a hash is summed into the
// rows as before; past MaxSettlements they are summed too.
func TestAggregatorKeepsSettlementsApart(t *testing.T) {
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, ProducerID: "p1", MaxSettlements: 2})
	settled := func(hash string, cost int64, expired bool) tollgate.UsageEvent {
		ev := event(t0+61_000_000, tA, kA, "POST /v1/complete", true, cost)
		ev.Hold, ev.Expired, ev.HoldHash = tollgate.HoldSettled, expired, hash
		return ev
	}
	h1, h2, h3 := strings.Repeat("1", 32), strings.Repeat("2", 32), strings.Repeat("3", 32)
	a.Record(settled(h1, 320, false))
	a.Record(settled(h1, 320, false)) // the retry, answered repeated
	a.Record(settled(h2, 0, true))
	a.Record(settled(h3, 7, false)) // past the bound
	a.Record(settled("", 11, false))
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := p.batches[0]
	want := []Settlement{
		{HoldHash: h1, Minute: 1_790_812_860, TenantID: tA, KeyID: kA, Tier: tollgate.TierAuthenticated, Resource: "POST /v1/complete", Cost: 320},
		{HoldHash: h2, Minute: 1_790_812_860, TenantID: tA, KeyID: kA, Tier: tollgate.TierAuthenticated, Resource: "POST /v1/complete", Expired: true},
	}
	if got := fmt.Sprint(b.Settlements); got != fmt.Sprint(want) {
		t.Errorf("settlements:\n got %v\nwant %v", got, want)
	}
	if got := p.totals()[tA+"/"+kA]; got != (Counts{AllowedUnits: 18}) {
		t.Errorf("rows %+v, want the 7 and 11 units past the bound and without a hash", got)
	}
	// A new batch forgets the holds of the last: a hold handed on again
	// later is there again (the worker counts it once).
	a.Record(settled(h1, 320, false))
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := p.batches[1].Settlements; len(got) != 1 || got[0].HoldHash != h1 {
		t.Errorf("second batch's settlements %v, want hold 1's", got)
	}
}

func TestDecodeKeepsBatchesWithoutSettlements(t *testing.T) {
	b, err := DecodeBatch([]byte(`{"v":1,"id":"old:1","created_us":0,"rows":[{"minute":1795000020,"tier":"anonymous",` +
		`"resource":"*","reason":"ok","allowed_units":3}]}`))
	if err != nil || len(b.Settlements) != 0 || len(b.Rows) != 1 {
		t.Fatalf("old batch: %+v, %v", b, err)
	}
	st := Settlement{HoldHash: strings.Repeat("a", 32), Minute: 1_795_000_020, Tier: "anonymous", Resource: "*", Cost: 1}
	for name, bad := range map[string]func(*Settlement){
		"short hash":     func(s *Settlement) { s.HoldHash = "abc" },
		"uppercase hash": func(s *Settlement) { s.HoldHash = strings.Repeat("A", 32) },
		"bad minute":     func(s *Settlement) { s.Minute++ },
		"bad tenant":     func(s *Settlement) { s.TenantID = "t" },
		"no tier":        func(s *Settlement) { s.Tier = "" },
		"negative cost":  func(s *Settlement) { s.Cost = -1 },
		"NUL in IP":      func(s *Settlement) { s.IP = "1.2.3.4\x00" },
	} {
		s := st
		bad(&s)
		if err := (&Batch{Version: 1, ID: "x", Settlements: []Settlement{s}}).validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := (&Batch{Version: 1, ID: "x", Settlements: []Settlement{st}}).validate(); err != nil {
		t.Errorf("a valid settlement refused: %v", err)
	}
}

// TestAggregatorLeavesJournaledUnitsToTheJournal: a decision the store
// journaled (Recorded) adds no row and no settlement (the journal has its
// units), but its anonymous caller's address and its crossings are
// counted here, and it is counted as recorded and journaled.
func TestAggregatorLeavesJournaledUnitsToTheJournal(t *testing.T) {
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, ProducerID: "p1"})
	keyed := event(t0, tA, kA, "GET /a", true, 3)
	keyed.Recorded, keyed.Crossed = true, []int64{100}
	a.Record(keyed)
	settled := event(t0, tA, kA, "GET /a", true, 9)
	settled.Hold, settled.HoldHash, settled.Recorded = tollgate.HoldSettled, "00112233445566778899aabbccddeeff", true
	a.Record(settled)
	a.Record(tollgate.UsageEvent{AtUS: t0, Tier: tollgate.TierAnonymous, IP: "192.0.2.1", Resource: "*", Cost: 2,
		Allowed: true, Reason: tollgate.ReasonOK, Recorded: true})
	denied := event(t0, tA, kA, "GET /a", false, 1)
	a.Record(denied)
	if err := a.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	b := p.batches[0]
	if len(b.Rows) != 1 || b.Rows[0].Denied != 1 || b.Rows[0].Allowed != 0 {
		t.Errorf("rows %+v, want the denial alone", b.Rows)
	}
	if len(b.Settlements) != 0 {
		t.Errorf("settlements %+v, want none", b.Settlements)
	}
	if len(b.IPs) != 1 || b.IPs[0].IP != "192.0.2.1" || b.IPs[0].AllowedUnits != 2 {
		t.Errorf("ip rows %+v, want the anonymous caller's", b.IPs)
	}
	if len(b.Crossings) != 1 || b.Crossings[0].Units != 100 {
		t.Errorf("crossings %+v, want the one crossed", b.Crossings)
	}
	if s := a.Stats(); s.Recorded != 4 || s.Journaled != 3 {
		t.Errorf("stats %+v, want 4 recorded, 3 of them journaled", s)
	}
}

// TestAggregatorSplitsRowsPastTheBound: 1,100 denials of the check API's
// largest cost (1e9) from one anonymous address in one minute pass what
// one row may count (2^40 units). The row goes out as it is and starts
// again, and so do the address's row and the sum of the addresses
// outside the top list: every published batch decodes (memProducer
// round-trips it), no count of any row passes the bound, and the totals
// are exact, a tenant's usage in the same flush too.
func TestAggregatorSplitsRowsPastTheBound(t *testing.T) {
	const cost = 1_000_000_000
	p := &memProducer{}
	a := NewAggregator(AggregatorConfig{Producer: p, ProducerID: "p1", TopIPs: 1})
	a.Record(event(t0, tA, kA, "GET /x", true, 5))
	anonymous := func(ip string, n int) {
		for range n {
			a.Record(tollgate.UsageEvent{AtUS: t0, Tier: tollgate.TierAnonymous, IP: ip, Resource: "GET /x", Cost: cost,
				Reason: tollgate.ReasonRateLimited, Denied: []string{"r"}})
		}
	}
	anonymous("203.0.113.9", 1_100)
	// Three more addresses below the bound each; the two outside the top
	// list pass it together.
	for _, ip := range []string{"203.0.113.10", "203.0.113.11", "203.0.113.12"} {
		anonymous(ip, 700)
	}
	if err := a.Flush(context.Background()); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if s := a.Stats(); s.Recorded != 3_201 || s.Dropped != 0 || s.Folded != 0 {
		t.Errorf("stats %+v, want 3,201 recorded, nothing dropped or folded", s)
	}
	const denied = 1_100 + 3*700
	want := map[string]Counts{tA + "/" + kA: {Allowed: 1, AllowedUnits: 5}, "/": {Denied: denied, DeniedUnits: denied * cost}}
	if got := p.totals(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("totals %v, want %v", got, want)
	}
	var rows, others int
	var ips Counts
	for _, b := range p.batches {
		for _, r := range b.Rows {
			rows++
			if err := validCounts(r.Counts); err != nil {
				t.Errorf("row %+v: %v", r, err)
			}
		}
		for _, r := range b.IPs {
			if err := validCounts(r.Counts); err != nil {
				t.Errorf("address row %+v: %v", r, err)
			}
			if r.IP == OtherIP {
				others++
			}
			ips.Add(r.Counts)
		}
	}
	if rows != 4 { // the tenant's; the anonymous 3,200 × 1e9 units in three
		t.Errorf("%d rows, want 4", rows)
	}
	if ips != want["/"] || others != 2 {
		t.Errorf("address rows sum to %+v in %d rows of %q, want %+v in 2", ips, others, OtherIP, want["/"])
	}
}

// TestSplitBatchRefusesBadPartsAlone: a batch's rows, address rows,
// settlements and crossings that cannot be applied are taken out with
// their reasons, and the rest keeps the batch's ID; DecodeBatch still
// refuses such a batch whole.
func TestSplitBatchRefusesBadPartsAlone(t *testing.T) {
	minute := int64(1_795_000_020)
	good := Row{Minute: minute, TenantID: tA, KeyID: kA, Tier: "authenticated", Resource: "GET /", Reason: "ok", Counts: Counts{Allowed: 1}}
	huge := good
	huge.TenantID, huge.DeniedUnits = tB, 1<<40+1
	b := Batch{Version: 1, ID: "p:7", Rows: []Row{good, huge},
		IPs:       []IPRow{{Minute: minute, IP: "192.0.2.1", Counts: Counts{Denied: 1}}, {Minute: minute + 1, IP: "192.0.2.2"}},
		Crossings: []Crossing{{TenantID: tA, Units: 100, AtUS: minute * 1_000_000}, {TenantID: "t", Units: 100}}}
	data, err := b.Encode()
	testenv.Must(t, err)
	ok, refused, err := SplitBatch(data)
	if err != nil {
		t.Fatal(err)
	}
	if ok.ID != "p:7" || len(ok.Rows) != 1 || ok.Rows[0] != good || len(ok.IPs) != 1 || len(ok.Crossings) != 1 {
		t.Errorf("kept %+v, want the good row, address row and crossing", ok)
	}
	if refused.BatchID != "p:7" || refused.Parts != 3 || len(refused.Reasons) != 3 ||
		!strings.HasPrefix(refused.Reasons[0], "rows[1]: counts above") || !strings.HasPrefix(refused.Reasons[1], "ips[1]: minute") ||
		!strings.HasPrefix(refused.Reasons[2], "crossings[1]:") {
		t.Errorf("refused %+v %q", refused, refused.Reasons)
	}
	var set Batch
	testenv.Must(t, json.Unmarshal(refused.Payload, &set))
	if set.ID != "p:7" || len(set.Rows) != 1 || set.Rows[0] != huge || len(set.IPs) != 1 || len(set.Crossings) != 1 {
		t.Errorf("set aside %+v, want the bad row, address row and crossing", set)
	}
	if _, err := DecodeBatch(data); err == nil {
		t.Error("DecodeBatch accepted the batch")
	}
	if b, refused, err := SplitBatch([]byte(`{"v":2,"id":"p:8","rows":[{}]}`)); err == nil || b.ID != "" || refused.BatchID != "p:8" || refused.Parts != 1 {
		t.Errorf("unknown version: %+v %+v %v, want it refused whole", b, refused, err)
	}
}
