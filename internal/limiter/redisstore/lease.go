package redisstore

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/tollgate/tollgate/internal/limiter"
)

//go:embed release.lua
var releaseLua string

// leaseLua is lease.lua, which ops.lua runs.
//
//go:embed lease.lua
var leaseLua string

// Renew moves a lease's slots to expire their rules' lease TTL from now,
// in one script call. It returns limiter.ErrLeaseNotFound for a lease
// unknown, released or expired, and wrapped store errors.
func (s *Store) Renew(ctx context.Context, ref limiter.LeaseRef) (limiter.LeaseState, error) {
	reply, err := s.lease(ctx, opRenew, ref)
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
	reply, err := s.lease(ctx, opRelease, ref)
	if err != nil {
		return false, err
	}
	return reply[2] == 1, nil
}

// lease runs lease.lua's op (opRenew or opRelease) on ref and returns its
// reply's three numbers.
func (s *Store) lease(ctx context.Context, op int, ref limiter.LeaseRef) ([3]int64, error) {
	values, err := s.runOp(ctx, op, ref.Key, 0, ref.NowUS, nil)
	if err != nil {
		return [3]int64{}, err
	}
	return decodeLease(values)
}

// decodeLease reads a renewal's or release's three numbers from ops.lua's
// reply.
func decodeLease(values []any) ([3]int64, error) {
	var reply [3]int64
	for i := range reply {
		n, ok := values[i].(int64)
		if !ok {
			return reply, fmt.Errorf("redisstore: lease: reply %v", values)
		}
		reply[i] = n
	}
	return reply, nil
}
