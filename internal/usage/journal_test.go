package usage

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestJournalAppliedExactlyOnce: what the check scripts journaled (checks
// of several callers on several hash tags, a hold settled) reaches the
// usage tables once, through a worker that dies after its commit and
// before its Ack, and a second worker that takes over the same claims;
// claims made after the journals were applied find them gone.
func TestJournalAppliedExactlyOnce(t *testing.T) {
	r := newWorkerRig(t)
	ctx := context.Background()
	_, prefix := testenv.Redis(t) // a prefix of this test's own
	store := redisstore.New(r.client)
	gcra := limiter.Params{Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS}
	now := at(t, "2026-11-20T10:00") * 1_000_000
	type caller struct{ tenant, key string }
	callers := []caller{{tA, kA}, {tB, kB}}
	want := map[string]metering.Counts{}
	for i, c := range callers {
		tag, short := statekey.Compact(c.key)
		key := string(statekey.AppendKey(nil, prefix, tag, [3]byte{1, 2, 3}, short[:], nil))
		entry := statekey.UsageEntry(c.tenant, c.key, "authenticated", "GET /a")
		for n := range 10 + i {
			cost := int64(n%3 + (i * 2)) // some cost 0, some 1, some more
			out, err := store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: gcra}}, Cost: cost,
				NowUS: now + int64(n)*limiter.MinuteUS, Usage: entry})
			if err != nil || !out.Admitted || !out.Recorded {
				t.Fatalf("check: %+v %v", out, err)
			}
			w := want[c.tenant+"/"+c.key]
			w.Allowed++
			w.AllowedUnits += cost
			want[c.tenant+"/"+c.key] = w
		}
	}
	// A hold of the first caller: its decision at the check, its 7 units
	// at the settlement, retried.
	tag, short := statekey.Compact(kA)
	key := string(statekey.AppendKey(nil, prefix, tag, [3]byte{1, 2, 3}, short[:], nil))
	hold := &limiter.Hold{ID: "h1", Key: statekey.HoldKey(prefix, tag, "h1"), TTLUS: limiter.HourUS,
		Usage: statekey.HoldUsage("00112233445566778899aabbccddeeff", "", statekey.UsageRow(tA, kA, "authenticated", "GET /a"))}
	if out, err := store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: gcra}}, Cost: 20, Hold: hold,
		NowUS: now, Usage: statekey.UsageEntry(tA, kA, "authenticated", "GET /a")}); err != nil || !out.Recorded {
		t.Fatalf("hold: %+v %v", out, err)
	}
	for range 2 {
		if st, err := store.Settle(ctx, limiter.Settle{Key: hold.Key, Cost: 7, NowUS: now + 1}); err != nil || !st.Recorded {
			t.Fatalf("settle: %+v %v", st, err)
		}
	}
	w := want[tA+"/"+kA]
	w.Allowed++
	w.AllowedUnits += 7
	want[tA+"/"+kA] = w

	journal := func() *JournalConsumer { return NewJournalConsumer(r.client, prefix, time.Millisecond) }
	first := &Worker{Consumer: journal(), Store: r.store, FetchCount: 1, RetryMax: 100 * time.Millisecond,
		AfterApply: crashAfter(1)}
	if err := first.Run(ctx); !errors.Is(err, errCrash) {
		t.Fatalf("first worker: %v, want the simulated crash", err)
	}
	second := &Worker{Consumer: journal(), Store: r.store, FetchCount: 8, RetryMax: 100 * time.Millisecond}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- second.Run(runCtx) }()
	testenv.Eventually(t, time.Now(), 30*time.Second, "journals applied", func() (bool, string) {
		n, err := r.client.Exists(ctx, statekey.JournalKey(prefix, tag), statekey.ClaimedJournalKey(prefix, tag)).Result()
		got := sums(t, r.db, "usage_minute")
		return err == nil && n == 0 && got[tA+"/"+kA] == want[tA+"/"+kA] && got[tB+"/"+kB] == want[tB+"/"+kB],
			"journals left or totals short"
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s := second.Stats(); s.Duplicates != 1 || s.Journals != s.Applied || s.Journals < 1 {
		t.Errorf("second worker: %+v; want 1 duplicate (the claim the first applied and never acknowledged), and every batch it applied a journal", s)
	}
	for k, w := range want {
		if got := sums(t, r.db, "usage_month")[k]; got != w {
			t.Errorf("%s: month totals %+v, want %+v", k, got, w)
		}
	}
	// Nothing is left to claim.
	if msgs, err := journal().Fetch(ctx, 100); err != nil || len(msgs) != 0 {
		t.Errorf("a claim after the apply: %d messages, %v", len(msgs), err)
	}
}

// TestJournalBatchRefusesWhatItCannotRead: a journal's entries add up by
// row and minute, one decision each, and read back as the rows and
// settlement they hold (a hold's entry once); an entry of another shape
// fails its batch (set aside whole).
func TestJournalBatchRefusesWhatItCannotRead(t *testing.T) {
	row, head := statekey.UsageRow(tA, kA, "authenticated", "GET /a"), statekey.UsageEntry(tA, kA, "authenticated", "GET /a")
	entry := func(f, v string) string { return fmt.Sprintf("%d:%s%d:%s", len(f), f, len(v), v) }
	check := func(minute, units string) string {
		return head + minute + fmt.Sprintf("%d:%s", len(units), units)
	}
	hold := "1795168800\x007\x001\x00\x00" + row
	raw := check("1795168800", "3") + check("1795168800", "0") + check("1795168860", "0") +
		entry("s00112233445566778899aabbccddeeff", hold) + check("1795168800", "2") +
		entry("s00112233445566778899aabbccddeeff", "ignored: a hold counts once")
	b, err := metering.JournalBatch("journal:01:e:1", 0, raw)
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Rows) != 2 || b.Rows[0].Allowed != 3 || b.Rows[0].AllowedUnits != 5 || b.Rows[1].Allowed != 1 || b.Rows[1].AllowedUnits != 0 {
		t.Errorf("rows %+v", b.Rows)
	}
	if len(b.Settlements) != 1 || b.Settlements[0].Cost != 7 || !b.Settlements[0].Expired {
		t.Errorf("settlements %+v", b.Settlements)
	}
	for _, raw := range []string{
		entry("x", "1"),
		check("1795168800", "five"),
		entry("r"+"t\x00k\x001795168800", "1"),
		entry("s0011", "1795168800\x007"),
		"12:short",
		"x:1",
	} {
		if _, err := metering.JournalBatch("journal:01:e:1", 0, raw); err == nil {
			t.Errorf("%q: no error", raw)
		}
	}
}
