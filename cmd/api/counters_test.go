package main

import (
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/usage"
)

// counterStore returns a usage store whose sweep reads the tenants'
// monthly quota counters from the rig's Redis, under the api's key
// prefix, as the store of `admin worker` does.
func (r *rig) counterStore() *usage.Store {
	return usage.NewStore(r.db, usage.StoreConfig{Hooks: []usage.Hook{quota.NewIngest(r.db,
		quota.IngestConfig{Counters: redisstore.New(r.redis), KeyPrefix: r.env["TOLLGATE_KEY_PREFIX"]})}})
}

// counterWorker returns a usage worker on counterStore that sweeps every
// second rather than every half minute.
func (r *rig) counterWorker(name string) *usage.Worker {
	w := r.worker(name)
	w.Store = r.counterStore()
	w.SweepInterval = time.Second
	return w
}

// startSilentAPIProcess starts the api as a program of its own, as
// startAPIProcess does, that publishes no usage (TOLLGATE_USAGE_SINK=none):
// the batches of its checks, crossings included, are lost as surely as
// those of a process killed before it could publish them, while what its
// checks count in Redis stays.
func (r *rig) startSilentAPIProcess(t *testing.T) (string, *testenv.Process) {
	t.Helper()
	r.env["TOLLGATE_USAGE_SINK"] = "none"
	defer delete(r.env, "TOLLGATE_USAGE_SINK")
	return r.startAPIProcess(t)
}
