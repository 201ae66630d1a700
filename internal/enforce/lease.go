package enforce

import (
	"context"
	"errors"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/statekey"
)

// timeFormat is how answers write instants: RFC 3339, UTC, milliseconds.
const timeFormat = "2006-01-02T15:04:05.000Z07:00"

// leaseFor returns the lease a check of r over reqs takes on its
// concurrency rules, and its ID: the check's hold ID when it holds too
// (the records' keys differ), else a fresh one of the same form.
func (c *Checker) leaseFor(holdID string, reqs []limiter.Request, r Request, d *Decision) (*limiter.Lease, string) {
	tag := statekey.Tag(c.prefix, reqs[0].Key)
	id := holdID
	if id == "" {
		id = newHoldID(tag, c.region.Name, d, r)
	}
	return &limiter.Lease{Key: c.leaseKey(tag, id)}, id
}

// leaseKey returns the key of lease id's record, beside its states.
func (c *Checker) leaseKey(tag byte, id string) string {
	return statekey.LeaseKey(c.prefix, tag, id)
}

// leasedTTL returns the shortest lease TTL (µs) of the concurrency rules
// among reqs that allowed (results): how long the lease an admitted check
// took lasts unrenewed; 0 when it took no slot.
func leasedTTL(reqs []limiter.Request, results []limiter.Result) int64 {
	var ttl int64
	for i := range reqs {
		if p := reqs[i].Params; p.Algorithm == limiter.Concurrency && results[i].Allowed && (ttl == 0 || p.PeriodUS < ttl) {
			ttl = p.PeriodUS
		}
	}
	return ttl
}

// Lease is the answer to a renewal or release (the body of a 200 from
// /v1/renew or /v1/release).
type Lease struct {
	LeaseID string `json:"lease_id"`
	// ExpiresAt is when the renewed lease's first slot is freed unless
	// renewed again (RFC 3339, UTC, ms), and TTLMS how long that was from
	// the store's clock at the renewal (ms, rounded down); zero for a
	// release.
	ExpiresAt string `json:"expires_at,omitempty"`
	TTLMS     int64  `json:"ttl_ms,omitempty"`
	// Released is, for a release, whether a slot was still held (false:
	// released before, or expired).
	Released *bool `json:"released,omitempty"`
}

// RenewLease renews lease id: each slot it holds expires its rule's lease
// TTL from now. An unknown, released or expired lease is not found (its
// slots may be someone else's by now), a malformed ID invalid. One store
// call, no Postgres.
func (c *Checker) RenewLease(ctx context.Context, id string) (Lease, error) {
	var st limiter.LeaseState
	err := c.onLease(ctx, id, "renewal", func(ctx context.Context, ref limiter.LeaseRef) (err error) {
		st, err = c.leaser.Renew(ctx, ref)
		return err
	})
	if errors.Is(err, limiter.ErrLeaseNotFound) {
		return Lease{}, tollgate.Errorf(tollgate.ENOTFOUND, "no such lease (unknown, released, or expired: its slot may be taken)")
	}
	if err != nil {
		return Lease{}, err
	}
	return Lease{LeaseID: id, ExpiresAt: time.UnixMicro(st.ExpiresAtUS).UTC().Format(timeFormat), TTLMS: max(st.ExpiresAtUS-st.NowUS, 0) / 1000}, nil
}

// ReleaseLease frees the slots of lease id. Releasing again, or a lease
// that expired, answers released false. One store call, no Postgres.
func (c *Checker) ReleaseLease(ctx context.Context, id string) (Lease, error) {
	var released bool
	err := c.onLease(ctx, id, "release", func(ctx context.Context, ref limiter.LeaseRef) (err error) {
		released, err = c.leaser.Release(ctx, ref)
		return err
	})
	if err != nil {
		return Lease{}, err
	}
	if released {
		if ref, ok := parseHoldID(id); ok {
			c.denials.givenBack(ref.Tag)
		}
	}
	return Lease{LeaseID: id, Released: &released}, nil
}

// onLease runs op, the lease operation what, on the store's reference to
// lease id, within the store timeout. A malformed ID is EINVALID and a
// store that keeps no leases EUNAVAILABLE, without calling op; op's
// ErrLeaseNotFound is returned as it is, and any other error of op is
// counted as the store's failure and returned as EUNAVAILABLE.
func (c *Checker) onLease(ctx context.Context, id, what string, op func(context.Context, limiter.LeaseRef) error) error {
	ref, ok := parseHoldID(id)
	if !ok {
		return tollgate.Invalid(map[string]string{"lease_id": "is not a lease ID"})
	}
	if c.leaser == nil {
		return tollgate.Errorf(tollgate.EUNAVAILABLE, "this limiter store keeps no leases")
	}
	storeCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	err := op(storeCtx, limiter.LeaseRef{Key: c.leaseKey(ref.Tag, id)})
	if legacy := statekey.LegacyLeaseKey(c.prefix, ref.Tag, id); errors.Is(err, limiter.ErrLeaseNotFound) && legacy != "" {
		err = op(storeCtx, limiter.LeaseRef{Key: legacy})
	}
	if err != nil && !errors.Is(err, limiter.ErrLeaseNotFound) {
		c.storeFailed(ctx, err)
		return tollgate.Errorf(tollgate.EUNAVAILABLE, "the limiter store did not answer; retry the %s", what)
	}
	return err
}
