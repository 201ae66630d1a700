package exchange

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/region"
	"github.com/tollgate/tollgate/internal/statekey"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestOneExchangerPerRegion: two workers of region us run an exchanger
// each; one exchanges and the other stands by. When the lease's holder
// dies holding it (its lease taken by a worker that then dies), the
// exchanging worker stops and, once the lease lapses, one of the two
// takes over; when the exchanging worker stops, the other takes over at
// once. Every admission of us reaches eu and ap exactly once
// throughout.
func TestOneExchangerPerRegion(t *testing.T) {
	_, regions := startExchange(t, 20*time.Millisecond, nil)
	ctx := context.Background()
	us := regions["us"]
	us2 := &exchangeRegion{name: "us", rdb: us.rdb, store: us.store, cfg: us.cfg, logOut: &testenv.LogBuffer{}}
	us2.start(t)
	stopped := map[*exchangeRegion]bool{}
	t.Cleanup(func() {
		if !stopped[us2] {
			us2.stop()
		}
		if t.Failed() {
			t.Logf("second exchanger of us:\n%s", us2.logOut.String())
		}
	})
	workers := []*exchangeRegion{us, us2}
	// exchanging returns the one worker of us that exchanges, failing
	// the test when both do.
	exchanging := func() *exchangeRegion {
		t.Helper()
		var found *exchangeRegion
		for _, w := range workers {
			if stopped[w] || !w.x.Active() {
				continue
			}
			if found != nil {
				t.Fatalf("both workers of us exchange")
			}
			found = w
		}
		return found
	}
	testenv.WaitFor(t, 10*time.Second, "the second worker of us standing by", func() bool {
		return strings.Contains(us2.logOut.String(), "standing by")
	})
	if exchanging() != us {
		t.Fatalf("the first worker of us does not exchange")
	}

	key := string(statekey.AppendKey(nil, prefix, 'b', [3]byte{4, 5, 6}, []byte("tenat"), nil))
	others := []*exchangeRegion{regions["eu"], regions["ap"]}
	admit(t, us, key, 20)
	converged(t, others, key, 20, 10*time.Second)

	// A worker that took the lease and died holding it: the worker
	// that exchanged finds its lease gone and stops; nobody exchanges
	// until the lease lapses; then one of the two takes over, and what
	// us admitted meanwhile arrives.
	lease := prefix + "regions:exchanger"
	testenv.Must(t, us.rdb.Set(ctx, lease, "a worker that died", 2*time.Second).Err())
	testenv.WaitFor(t, 5*time.Second, "the exchanging worker stopping", func() bool { return exchanging() == nil })
	admit(t, us, key, 15)
	took := time.Now()
	testenv.WaitFor(t, 10*time.Second, "a worker of us taking the lease over", func() bool { return exchanging() != nil })
	t.Logf("a worker of us took over %v after it stopped (the lease had 2 s left)", time.Since(took).Round(time.Millisecond))
	converged(t, others, key, 35, 10*time.Second)

	// The exchanging worker stops: it gives the lease up, and the other
	// takes over within a renewal interval.
	w := exchanging()
	w.stop()
	stopped[w] = true
	took = time.Now()
	admit(t, us, key, 5)
	testenv.WaitFor(t, 5*time.Second, "the other worker of us taking over", func() bool { return exchanging() != nil })
	if d := time.Since(took); d > 2*region.DefaultLeaseTTL/3 {
		t.Errorf("the other worker took over %v after the first stopped, want within %v", d, 2*region.DefaultLeaseTTL/3)
	}
	converged(t, others, key, 40, 10*time.Second)
}

// TestTwoSendersLoseNothing: exchangers of region us that send at once
// (as two workers that both believed they held the lease would, for a
// moment; three here, for more interleavings) publish every admission
// of us: eu and ap count each once. Each clears only the claims it
// published (clear.lua); a sequence published by two with other tags is
// two messages (msgID); and a sender whose sequence is older than a
// tag's last claim leaves the tag to the next claim (claim.lua), since
// the receivers would skip it as applied.
func TestTwoSendersLoseNothing(t *testing.T) {
	_, regions := startExchange(t, 20*time.Millisecond, nil)
	ctx := context.Background()
	us := regions["us"]
	us.stop()
	testenv.Must(t, us.rdb.Del(ctx, prefix+"regions:exchanger").Err())
	var senders []*Exchanger
	for range 3 {
		nc, err := Dial(us.cfg, 5*time.Second)
		testenv.Must(t, err)
		t.Cleanup(nc.Close)
		x, err := New(us.rdb, nc, Config{Region: us.cfg, Prefix: prefix})
		testenv.Must(t, err)
		testenv.Must(t, x.setup(ctx))
		senders = append(senders, x)
	}
	// The interleaving that lost debits, step by step: a sender takes a
	// sequence; another takes a later one, claims the tag and publishes
	// it; the first then claims the tag's new admissions under its
	// older sequence, which the receivers would skip as applied. It
	// claims nothing, and the next claim sends them.
	others := []*exchangeRegion{regions["eu"], regions["ap"]}
	stale := string(statekey.AppendKey(nil, prefix, 'z', [3]byte{7, 8, 9}, []byte("tenat"), nil))
	older, err := seqScript.Run(ctx, us.rdb, []string{prefix + "regions:seq"}).Int64()
	testenv.Must(t, err)
	admit(t, us, stale, 5)
	_, err = senders[0].send(ctx, false)
	testenv.Must(t, err)
	converged(t, others, stale, 5, 10*time.Second)
	admit(t, us, stale, 3)
	got, err := claimScript.Run(ctx, us.rdb, []string{statekey.OutboxKey(prefix, 'z'), statekey.ClaimedKey(prefix, 'z'),
		statekey.AppliedKey(prefix, 'z')}, older, claimFields).Slice()
	testenv.Must(t, err)
	if len(got) != 0 {
		t.Errorf("a claim under an older sequence than the tag's last took %v, want nothing", got)
	}
	_, err = senders[1].send(ctx, false)
	testenv.Must(t, err)
	converged(t, others, stale, 8, 10*time.Second)

	keys := make([]string, 16) // on sixteen hash tags
	for i := range keys {
		keys[i] = string(statekey.AppendKey(nil, prefix, byte('A'+i), [3]byte{7, 8, 9}, []byte("tenat"), nil))
	}
	sendCtx, stopSending := context.WithCancel(ctx)
	var sending sync.WaitGroup
	for _, x := range senders {
		sending.Go(func() {
			for sendCtx.Err() == nil {
				_, _ = x.send(sendCtx, false)
			}
		})
	}
	var admitting sync.WaitGroup
	for i, key := range keys {
		admitting.Go(func() {
			for range 100 + i {
				o, err := us.store.Check(ctx, limiter.Batch{Requests: []limiter.Request{{Key: key, Params: hourly}}, Cost: 1})
				if err != nil || !o.Admitted {
					t.Errorf("admit: %v, %+v", err, o)
					return
				}
			}
		})
	}
	admitting.Wait()
	testenv.Eventually(t, time.Now(), 20*time.Second, "eu and ap counting every admission of us", func() (bool, string) {
		var got []string
		done := true
		for i, key := range keys {
			want := int64(100 + i)
			eu, ap := count(t, regions["eu"], key), count(t, regions["ap"], key)
			done = done && eu == want && ap == want
			got = append(got, fmt.Sprintf("%d/%d of %d", eu, ap, want))
		}
		return done, strings.Join(got, ", ")
	})
	stopSending()
	sending.Wait()
}
