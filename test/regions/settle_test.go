package regions

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testenv"
)

// settle: holds opened in us on a global_shared rule count their
// estimates in every region; settled through eu and ap (each forwards
// the settlement to us, which keeps the holds) and through us, every
// region then counts what was settled, the differences exchanged.
func (b *bed) settle(t *testing.T) {
	var ids []string
	for range 3 {
		var m map[string]any
		status, _, err := b.post(b.apis["us"], "/v1/check", map[string]any{"key": b.key, "resource": "GET /held", "cost": 10, "hold": true}, &m)
		id, _ := m["hold_id"].(string)
		if err != nil || status != http.StatusOK || id == "" {
			t.Fatalf("hold in us: %d %v %v", status, m, err)
		}
		ids = append(ids, id)
	}
	converged := func(want int64) time.Duration {
		t.Helper()
		start := time.Now()
		testenv.Eventually(t, start, 15*time.Second, fmt.Sprintf("every region counting %d", want), func() (bool, string) {
			got := map[string]int64{}
			all := true
			for _, name := range names {
				got[name] = b.count(name, "held")
				all = all && got[name] == want
			}
			return all, fmt.Sprint(got)
		})
		return time.Since(start)
	}
	converged(30)
	settled := time.Now()
	for i, at := range []struct {
		region string
		cost   int64
	}{{"eu", 4}, {"ap", 25}, {"us", 0}} {
		var m map[string]any
		status, _, err := b.post(b.apis[at.region], "/v1/settle", map[string]any{"hold_id": ids[i], "cost": at.cost}, &m)
		if err != nil || status != http.StatusOK || m["status"] != "settled" || m["cost"] != float64(at.cost) {
			t.Errorf("us's hold settled at %d through %s: %d %v %v", at.cost, at.region, status, m, err)
		}
	}
	took := time.Since(settled)
	b.allowed.Add(4 + 25 + 0) // the usage scenario's: a hold's units count at its settlement
	every := converged(4 + 25 + 0)
	t.Logf("figure settle: three holds of 10 opened in us, settled at 4 through eu, 25 through ap and 0 in us in %v; every region counting the 29 settled %v later",
		took.Round(time.Millisecond), every.Round(time.Millisecond))
}
