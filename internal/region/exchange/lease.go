package exchange

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/region"
)

// The lease's scripts: renew and release only the holder's own lease.
var (
	renewScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0`)
	releaseScript = redis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`)
)

// lease is a region's exchange lease: one key in the region's Redis
// whose value names the worker that exchanges. Every worker of a region
// runs an Exchanger; the one holding the lease exchanges and the others
// stand by, so that a region keeps one sender of its sequences (two
// would race each other's claims) and one reader of each other region,
// and loses neither when a worker dies.
type lease struct {
	rdb   redis.UniversalClient
	key   string
	token string
	ttl   time.Duration
}

func newLease(rdb redis.UniversalClient, prefix string, ttl time.Duration) *lease {
	if ttl <= 0 {
		ttl = region.DefaultLeaseTTL
	}
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	host, _ := os.Hostname()
	return &lease{rdb: rdb, key: prefix + "regions:exchanger", ttl: ttl,
		token: fmt.Sprintf("%s pid %d %s", host, os.Getpid(), hex.EncodeToString(b))}
}

// acquire takes the lease if nobody holds it; it returns whether it did
// and, when another worker holds it, that worker's name.
func (l *lease) acquire(ctx context.Context) (ok bool, holder string, err error) {
	ctx, cancel := context.WithTimeout(ctx, l.ttl/3)
	defer cancel()
	ok, err = l.rdb.SetNX(ctx, l.key, l.token, l.ttl).Result()
	if err != nil || ok {
		return ok, "", err
	}
	holder, err = l.rdb.Get(ctx, l.key).Result()
	if errors.Is(err, redis.Nil) {
		err = nil // expired between the two: the next attempt may take it
	}
	if holder == l.token {
		return true, "", nil // this worker's SET NX took it, and its answer was lost
	}
	return false, holder, err
}

// renew extends the lease, giving up at deadline; lost is true when
// another worker holds it now (this one's expired).
func (l *lease) renew(ctx context.Context, deadline time.Time) (lost bool, err error) {
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	n, err := renewScript.Run(ctx, l.rdb, []string{l.key}, l.token, l.ttl.Milliseconds()).Int64()
	if err != nil {
		return false, err
	}
	return n == 0, nil
}

// release gives the lease up, if this worker still holds it, so that a
// standing-by worker takes over at once.
func (l *lease) release() {
	ctx, cancel := context.WithTimeout(context.Background(), l.ttl/3)
	defer cancel()
	_ = releaseScript.Run(ctx, l.rdb, []string{l.key}, l.token).Err()
}

// hold runs active while the lease is held: it renews the lease every
// TTL/3 and cancels active's context when the lease is lost, or when a
// renewal fails half a TTL or more after the last one succeeded (the
// second failure: the next tick would find the lease lapsed, and
// another worker may hold it by then). It returns once active has
// returned.
func (l *lease) hold(ctx context.Context, active func(context.Context), lost func(error)) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		active(ctx)
	}()
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	renewed := time.Now()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		asked := time.Now() // Redis counts the TTL from no sooner
		// A renewal that hangs is given up in time to stop before the
		// lease can lapse.
		deadline := asked.Add(l.ttl / 3)
		if last := renewed.Add(l.ttl * 5 / 6); last.Before(deadline) {
			deadline = last
		}
		gone, err := l.renew(ctx, deadline)
		switch {
		case err == nil && !gone:
			renewed = asked
			continue
		case gone:
			lost(errors.New("another worker holds the region's exchange lease"))
		case time.Since(renewed) < l.ttl/2:
			continue // once more at the next tick, while it cannot have lapsed
		default:
			lost(fmt.Errorf("exchange lease not renewed for %v: %w", time.Since(renewed).Round(time.Millisecond), err))
		}
		cancel()
		<-done
		return
	}
}
