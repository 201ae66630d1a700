package limiter_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	. "github.com/tollgate/tollgate/internal/limiter"
)

// TestLookConsumesNothing: a look (cost 0, dry run: what GET /v1/me
// asks) changes no state on any algorithm and store: the keys stay byte
// for byte as they were, with the same expiry, repeated looks answer the
// same, and the next real check answers what it answers on a twin key
// that was never looked at — from a fresh, a half-used and a spent state.
func TestLookConsumesNothing(t *testing.T) {
	params := []Params{}
	for _, a := range Algorithms {
		params = append(params, Params{Algorithm: a, Limit: 5, PeriodUS: MinuteUS, Burst: 5})
	}
	params = append(params, Params{Algorithm: LeakyBucket, Limit: 5, PeriodUS: MinuteUS, Burst: 5, Shape: true})
	for _, sc := range stores() {
		t.Run(sc.name, func(t *testing.T) {
			store := sc.open(t)
			ctx := context.Background()
			leases := 0
			// lease names a new lease (ignored but by concurrency rules).
			lease := func() *Lease {
				leases++
				return &Lease{Key: fmt.Sprintf("%slease%d", store.ns, leases)}
			}
			for i, p := range params {
				for _, used := range []int64{0, 3, 5} {
					name := string(p.Algorithm) + map[bool]string{true: "-shape"}[p.Shape]
					looked := Request{Key: store.ns + name + "-looked-" + string(rune('0'+used)), Params: p}
					twin := Request{Key: store.ns + name + "-twin-" + string(rune('0'+used)), Params: p}
					at := epoch + int64(i)*HourUS
					for _, r := range []Request{looked, twin} {
						if used > 0 {
							if _, err := store.Check(ctx, Batch{Requests: []Request{r}, Cost: used, NowUS: at, Lease: lease()}); err != nil {
								t.Fatal(err)
							}
						}
					}
					at += SecondUS
					var before []rawKey
					if store.rdb != nil {
						before = rawKeys(t, store.rdb, []string{looked.Key})
					}
					var first Outcome
					for n := range 5 {
						out, err := store.Check(ctx, Batch{Requests: []Request{looked}, Cost: 0, DryRun: true, NowUS: at})
						if err != nil {
							t.Fatal(err)
						}
						if n == 0 {
							first = out
						} else if !reflect.DeepEqual(out, first) {
							t.Errorf("%s after %d: look %d = %+v, want %+v as the first", name, used, n, out, first)
						}
					}
					wantRemaining := max(p.Limit-used, 0)
					if p.Algorithm == Concurrency {
						wantRemaining = p.Limit - min(used, 1) // one request in flight
					}
					if first.Results[0].Remaining != wantRemaining && p.Algorithm != SlidingWindowCounter {
						t.Errorf("%s after %d: look says %d remaining, want %d", name, used, first.Results[0].Remaining, wantRemaining)
					}
					if store.rdb != nil {
						if after := rawKeys(t, store.rdb, []string{looked.Key}); !reflect.DeepEqual(after, before) {
							t.Errorf("%s after %d: a look changed the key: %+v, was %+v", name, used, after, before)
						}
					}
					got, err := store.Check(ctx, Batch{Requests: []Request{looked}, Cost: 1, NowUS: at, Lease: lease()})
					if err != nil {
						t.Fatal(err)
					}
					want, err := store.Check(ctx, Batch{Requests: []Request{twin}, Cost: 1, NowUS: at, Lease: lease()})
					if err != nil {
						t.Fatal(err)
					}
					if !reflect.DeepEqual(got, want) {
						t.Errorf("%s after %d: the check after looks = %+v, on a twin never looked at %+v", name, used, got, want)
					}
				}
			}
		})
	}
}
