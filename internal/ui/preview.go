package ui

import (
	"context"
	"fmt"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
)

// A rule's preview shows what it admits of a burst: the real algorithm,
// run on the in-memory limiter (limiter.MemoryStore, which decides exactly
// as the Redis script does) over a simulated clock. Traffic: a burst of
// twice the rule's capacity at once, then twice its sustained rate, for
// two periods.

// previewTicks is the number of instants traffic arrives at.
const previewTicks = 60

// previewStart is the simulated clock's start, 2026-01-01T00:00Z in µs:
// calendar windows start with it.
const previewStart int64 = 1_767_225_600_000_000

// preview is what a rule admitted of the simulated traffic.
type preview struct {
	// TickUS is the time between instants; HorizonUS the whole run.
	TickUS, HorizonUS int64
	Ticks             []previewTick
	// Burst is the first instant's offer; Sustained each later one's.
	Burst, Sustained int64
	// AdmittedAtOnce is what the burst got; Admitted and Offered the run's
	// totals.
	AdmittedAtOnce, Admitted, Offered int64
	// MaxDelayUS is the longest a shaping leaky bucket delayed a request.
	MaxDelayUS int64
}

type previewTick struct {
	AtUS              int64
	Offered, Admitted int64
}

// simulate runs the preview of r. Requests arriving at one instant are
// decided together: the limiter admits as many as it would one by one,
// found by asking it (dry runs) for the largest count it allows at once.
func simulate(r plans.Rule) preview {
	params := r.WithDefaults().Params()
	period := params.LongestWindowUS()
	capacity := params.EffectiveBurst()
	switch params.Algorithm {
	case limiter.FixedWindow, limiter.SlidingWindowLog, limiter.SlidingWindowCounter, limiter.Concurrency:
		capacity = params.Limit
	}
	p := preview{HorizonUS: 2 * period}
	p.TickUS = max(1, p.HorizonUS/previewTicks)
	p.Burst = max(1, 2*capacity)
	p.Sustained = max(1, limiter.CeilDiv(2*params.Limit*p.TickUS, max(1, period)))
	if p.Sustained > p.Burst {
		p.Sustained = p.Burst
	}
	store := limiter.NewMemoryStore(func() int64 { return previewStart })
	reqs := []limiter.Request{{Key: "{preview}", Params: params}}
	allows := func(now, cost int64) bool {
		out, err := store.Check(context.Background(), limiter.Batch{Requests: reqs, Cost: cost, DryRun: true, NowUS: now})
		return err == nil && out.Admitted
	}
	for i := range previewTicks {
		now := previewStart + int64(i)*p.TickUS
		offered := p.Sustained
		if i == 0 {
			offered = p.Burst
		}
		if params.Algorithm == limiter.Concurrency {
			// Requests one at a time, each in flight for its whole lease.
			var lo int64
			for lo < offered {
				lease := &limiter.Lease{Key: fmt.Sprintf("{preview}l%d.%d", i, lo)}
				out, err := store.Check(context.Background(), limiter.Batch{Requests: reqs, Cost: 1, NowUS: now, Lease: lease})
				if err != nil || !out.Admitted {
					break
				}
				lo++
			}
			p.tick(i, offered, lo)
			continue
		}
		// The largest admitted count: allows(n) implies allows(n-1).
		lo, hi := int64(0), offered
		for lo < hi {
			mid := (lo + hi + 1) / 2
			if allows(now, mid) {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		if lo > 0 {
			out, err := store.Check(context.Background(), limiter.Batch{Requests: reqs, Cost: lo, NowUS: now})
			if err == nil && out.Admitted {
				p.MaxDelayUS = max(p.MaxDelayUS, out.Results[0].DelayUS)
			}
		}
		p.tick(i, offered, lo)
	}
	return p
}

// tick records instant i: offered requests, admitted of them.
func (p *preview) tick(i int, offered, admitted int64) {
	if i == 0 {
		p.AdmittedAtOnce = admitted
	}
	p.Admitted += admitted
	p.Offered += offered
	p.Ticks = append(p.Ticks, previewTick{AtUS: int64(i) * p.TickUS, Offered: offered, Admitted: admitted})
}
