package quota

import "testing"

// SetCounterPage makes SweepCounters look at n tenants at a time until
// the test ends.
func SetCounterPage(t *testing.T, n int) {
	old := counterPage
	counterPage = n
	t.Cleanup(func() { counterPage = old })
}
