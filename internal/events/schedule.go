package events

import (
	"math/rand/v2"
	"time"
)

// Schedule is how long a failed delivery waits before its next attempt:
// Schedule[n-1] after the n-th attempt failed, each stretched or shrunk
// by up to ±Jitter at random, so that many deliveries failing together
// do not all come back together. After len(Schedule)+1 attempts (3 days
// 15 hours after the first, 3 days 7 hours at the least with jitter) the
// delivery has failed; it can still be replayed. docs/events.md shows it.
var Schedule = []time.Duration{
	5 * time.Second, time.Minute, 5 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 4 * time.Hour, 8 * time.Hour,
	12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour, 12 * time.Hour,
}

// Jitter is the largest fraction by which a retry's wait is changed.
const Jitter = 0.1

// DisableAfter is how long an endpoint may fail every attempt before it
// is disabled (and webhook_endpoint.disabled emitted): failing without a
// success, and without a pause longer than FailingGap between failures.
const DisableAfter = 5 * 24 * time.Hour

// FailingGap is the longest time between two failed attempts of a failing
// endpoint: a failure longer after the previous one starts the endpoint's
// failing time again, and an endpoint without a failure for longer is no
// longer failing (Sweep clears its failing time). It is longer than the
// longest wait of the Schedule, jitter included, so that one delivery's
// retries keep an endpoint that fails them failing.
const FailingGap = 24 * time.Hour

// retryAfter returns the wait after the attempts-th failed attempt and
// whether there is another attempt at all; random is in [0, 1).
func retryAfter(attempts int, random float64) (time.Duration, bool) {
	if attempts < 1 || attempts > len(Schedule) {
		return 0, false
	}
	base := Schedule[attempts-1]
	return base + time.Duration((2*random-1)*Jitter*float64(base)), true
}

// uniform is the deliverers' source of jitter.
func uniform() float64 { return rand.Float64() }
