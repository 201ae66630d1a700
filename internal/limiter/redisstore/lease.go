package redisstore

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

//go:embed release.lua
var releaseLua string

//go:embed lease.lua
var leaseLua string

// leaseScript is lease.lua after check.lua's wire constants and helpers
// and release.lua's release_lease.
var leaseScript = redis.NewScript(checkPrelude() + releaseLua + leaseLua)

// lease.lua's operations.
const (
	leaseRenew   = 1
	leaseRelease = 2
)

// Renew moves a lease's slots to expire their rules' lease TTL from now,
// in one script call. It returns limiter.ErrLeaseNotFound for a lease
// unknown, released or expired, and wrapped store errors.
func (s *Store) Renew(ctx context.Context, ref limiter.LeaseRef) (limiter.LeaseState, error) {
	reply, err := s.lease(ctx, leaseRenew, ref)
	if err != nil {
		return limiter.LeaseState{}, err
	}
	if reply[0] != 0 {
		return limiter.LeaseState{NowUS: reply[1]}, limiter.ErrLeaseNotFound
	}
	return limiter.LeaseState{NowUS: reply[1], ExpiresAtUS: reply[2]}, nil
}

// Release frees a lease's slots in one script call; released is false
// when none was still held.
func (s *Store) Release(ctx context.Context, ref limiter.LeaseRef) (bool, error) {
	reply, err := s.lease(ctx, leaseRelease, ref)
	if err != nil {
		return false, err
	}
	return reply[2] == 1, nil
}

// lease runs lease.lua's op on ref and returns its reply's three numbers.
func (s *Store) lease(ctx context.Context, op int, ref limiter.LeaseRef) ([3]int64, error) {
	var reply [3]int64
	values, err := leaseScript.Run(ctx, s.client, []string{ref.Key}, op, strconv.FormatInt(ref.NowUS, 10), strconv.FormatInt(s.ExtraTTL.Milliseconds(), 10)).Int64Slice()
	if err != nil {
		return reply, fmt.Errorf("redisstore: lease: %w", err)
	}
	if len(values) != len(reply) {
		return reply, fmt.Errorf("redisstore: lease: reply of %d values", len(values))
	}
	copy(reply[:], values)
	return reply, nil
}
