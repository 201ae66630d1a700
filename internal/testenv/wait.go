package testenv

import (
	"testing"
	"time"
)

// Eventually polls cond every 10 ms until it reports done, and fails the
// test when it has not within limit of since, quoting what and the last
// state cond described. It waits for servers, propagation and background
// goroutines; it asserts no speed beyond limit, which is a contract's bound
// (a change reaches the API within a second) or a generous guard.
func Eventually(t testing.TB, since time.Time, limit time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Since(since) > limit {
			if state != "" {
				t.Fatalf("%s: not within %v; last seen: %s", what, limit, state)
			}
			t.Fatalf("%s: not within %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitFor is Eventually from now for a condition with no state to report.
func WaitFor(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	Eventually(t, time.Now(), limit, what, func() (bool, string) { return cond(), "" })
}
