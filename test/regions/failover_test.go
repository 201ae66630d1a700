package regions

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/testenv"
)

// failover: a second worker of eu stands by beside the first, which
// holds the region's exchange lease. Under load from every region on a
// global_shared rule, eu's exchanging worker is killed (SIGKILL: it gives
// nothing up); the second takes the lease over once it lapses, publishes
// what the dead worker had claimed and what eu admitted since, and every
// region counts every admission exactly once. The second worker stays
// eu's worker for the scenarios after.
func (b *bed) failover(t *testing.T) {
	active := func(stats string) float64 {
		v, err := scrape(stats, "tollgate_region_exchanger_active")
		if err != nil {
			return -1
		}
		return v
	}
	// Its usage consumer claims the dead worker's pending batches soon.
	standby, stats := b.startWorker(t, "eu", "worker-eu-2", "TOLLGATE_USAGE_CLAIM_IDLE=5s")
	testenv.WaitFor(t, 30*time.Second, "eu's second worker standing by", func() bool { return active(stats) == 0 })
	if got := active(b.stats["eu"]); got != 1 {
		t.Fatalf("eu's first worker: tollgate_region_exchanger_active %v, want 1", got)
	}

	const rate = 40
	var total atomic.Int64
	var wg sync.WaitGroup
	for _, name := range names {
		wg.Go(func() {
			a, _ := b.load(b.apis[name], "GET /failover", rate, 8*time.Second)
			total.Add(int64(len(a)))
		})
	}
	time.Sleep(2 * time.Second) // fault injection: the kill lands under load
	b.workers["eu"].Kill()
	killed := time.Now()
	testenv.WaitFor(t, 15*time.Second, "eu's second worker taking the lease over", func() bool { return active(stats) == 1 })
	took := time.Since(killed)
	b.workers["eu"], b.stats["eu"] = standby, stats
	wg.Wait()
	loaded := time.Now()
	var converged time.Duration
	testenv.Eventually(t, loaded, 30*time.Second, "every region counting every admission once", func() (bool, string) {
		got := map[string]int64{}
		all := true
		for _, name := range names {
			got[name] = b.count(name, "failover")
			all = all && got[name] == total.Load()
		}
		converged = time.Since(loaded)
		return all, fmt.Sprintf("%v, admitted %d", got, total.Load())
	})
	t.Logf("figure failover: eu's exchanging worker killed under load (%d checks/s a region); its second worker exchanged %v after the kill (lease TTL 3 s, tried every 1 s); %d admitted in all, every region counting each once %v after the load ended",
		rate, took.Round(time.Millisecond), total.Load(), converged.Round(time.Millisecond))
}
