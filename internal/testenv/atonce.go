package testenv

import "sync"

// AtOnce calls do(i) for i from 0 to n-1, each in a goroutine of its own,
// all released at the same moment, and returns when every call has. It is
// for races that a test provokes on purpose: do must be safe for
// concurrent use and report its failures with t.Error, not t.Fatal.
func AtOnce(n int, do func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			do(i)
		})
	}
	close(start)
	wg.Wait()
}
