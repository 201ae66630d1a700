package enforce

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/backoff"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/statekey"
)

// holdRef is what a hold ID carries: where its record is (the hash tag of
// its states) and whom its usage counts for. The record's key is derived
// from a hash of the whole ID, so an ID altered in any part names no hold.
type holdRef struct {
	Tag   byte   `json:"g"`
	Nonce string `json:"n"`
	// Region is the region whose Redis keeps the hold, in a deployment
	// of regions ("" in one region).
	Region   string `json:"o,omitempty"`
	TenantID string `json:"t,omitempty"`
	KeyID    string `json:"k,omitempty"`
	Tier     string `json:"v"`
	IP       string `json:"i,omitempty"`
	Resource string `json:"r,omitempty"`
}

// newHoldID returns a fresh hold ID for a check of r by d's caller whose
// states share hash tag tag, in region ("" in a deployment of one).
func newHoldID(tag byte, region string, d *Decision, r Request) string {
	nonce := make([]byte, 12)
	_, _ = rand.Read(nonce)
	ref := holdRef{Tag: tag, Nonce: hex.EncodeToString(nonce), Region: region, TenantID: d.TenantID, KeyID: d.KeyID, Tier: d.Tier, Resource: r.route}
	if d.KeyID == "" {
		ref.IP = r.IP
	}
	b, _ := json.Marshal(ref)
	return base64.RawURLEncoding.EncodeToString(b)
}

// parseHoldID returns the reference an ID carries.
func parseHoldID(id string) (holdRef, bool) {
	var ref holdRef
	b, err := base64.RawURLEncoding.DecodeString(id)
	if err != nil || len(id) > 2048 || json.Unmarshal(b, &ref) != nil || ref.Nonce == "" {
		return holdRef{}, false
	}
	return ref, true
}

// HoldRegion returns the region that keeps hold id when it is another
// region of the deployment (docs/regions.md: a settlement is answered by
// the hold's region), and "" when this region keeps it, or it is no hold
// ID of the deployment's regions.
func (c *Checker) HoldRegion(id string) string {
	if !c.region.Enabled() {
		return "" // one region: the settlement parses the ID, once
	}
	ref, ok := parseHoldID(id)
	if !ok || ref.Region == c.region.Name || c.region.Index(ref.Region) < 0 {
		return ""
	}
	return ref.Region
}

// holdKey returns the key of hold id's record, beside its states.
func (c *Checker) holdKey(tag byte, id string) string {
	return statekey.HoldKey(c.prefix, tag, id)
}

// holdFor returns the limiter hold of a check of r over the matched rules
// whose state keys are reqs (with none, the balance's keys creditsKey):
// its TTL is r's, else the shortest of the rules', else the default; it
// charges on expiry when a rule says so.
func (c *Checker) holdFor(r Request, matched []*snapshot.Rule, reqs []limiter.Request, creditsKey string, d *Decision) (*limiter.Hold, string) {
	var ttlS int64
	charge := false
	for _, rule := range matched {
		if t := rule.Options.HoldTTLS; t > 0 && (ttlS == 0 || t < ttlS) {
			ttlS = t
		}
		charge = charge || rule.Options.HoldExpiry == "charge"
	}
	switch {
	case r.HoldTTLS > 0:
		ttlS = r.HoldTTLS
	case ttlS == 0:
		ttlS = plans.DefaultHoldTTLS
	}
	key := creditsKey
	if len(reqs) > 0 {
		key = reqs[0].Key
	}
	tag := statekey.Tag(c.prefix, key)
	id := newHoldID(tag, c.region.Name, d, r)
	return &limiter.Hold{ID: id, Key: c.holdKey(tag, id), TTLUS: ttlS * limiter.SecondUS, ChargeOnExpiry: charge}, id
}

// asksHold reports whether a matched rule asks for holds (option hold).
func asksHold(matched []*snapshot.Rule) bool {
	for _, rule := range matched {
		if rule.Options.Hold {
			return true
		}
	}
	return false
}

// refundOn returns the outcomes the matched rules ask a hold to be
// settled at 0 on (option refund_on), each once, in plans.RefundOutcomes'
// order; nil when none.
func refundOn(matched []*snapshot.Rule) []string {
	var out []string
	for _, o := range plans.RefundOutcomes {
		for _, rule := range matched {
			if slices.Contains(rule.Options.RefundOn, o) {
				out = append(out, o)
				break
			}
		}
	}
	return out
}

// Settlement is the answer to a settle (the body of a 200 from
// /v1/settle).
type Settlement = tollgate.Settlement

func holdStatus(s limiter.HoldStatus) string {
	switch s {
	case limiter.HoldSettled:
		return "settled"
	case limiter.HoldRefunded:
		return "refunded"
	case limiter.HoldCharged:
		return "charged"
	}
	return "open"
}

// ErrNoHolds is returned by Settle when the store cannot hold.
var ErrNoHolds = errors.New("enforce: the limiter store keeps no holds")

// Settle sets the actual cost of hold id: the difference to its estimate
// is given back or taken from every rule it took from, in one store call,
// and counted as usage. Repeating a settlement answers the same; another
// cost for a settled or expired hold is a conflict error, an unknown hold
// not found, a malformed ID or cost invalid. Every answer that finds the
// hold final (settled or expired: repeated, or a conflict) hands its usage
// on again, under the hold's hash, since the first answer may have been
// lost with its caller or its process; the usage pipeline counts a hold
// once. A settlement above the estimate draws on the tenant's prepaid
// balance as the current snapshot has it (creditsNow), in the same store
// call.
func (c *Checker) Settle(ctx context.Context, id string, cost int64) (Settlement, error) {
	ref, ok := parseHoldID(id)
	if !ok {
		return Settlement{}, tollgate.Invalid(map[string]string{"hold_id": "is not a hold ID"})
	}
	if cost < 0 || cost > limiter.MaxSettleCost {
		return Settlement{}, tollgate.Invalid(map[string]string{"cost": fmt.Sprintf("must be between 0 and %d", limiter.MaxSettleCost)})
	}
	if c.settler == nil {
		return Settlement{}, ErrNoHolds
	}
	storeCtx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req := limiter.Settle{Key: c.holdKey(ref.Tag, id), Cost: cost, Credits: c.creditsNow(ref)}
	st, err := c.settler.Settle(storeCtx, req)
	if legacy := statekey.LegacyHoldKey(c.prefix, ref.Tag, id); errors.Is(err, limiter.ErrHoldNotFound) && legacy != "" {
		req.Key = legacy
		st, err = c.settler.Settle(storeCtx, req)
	}
	if !errors.Is(err, limiter.ErrHoldNotFound) {
		// Below its estimate, or releasing a lease the hold took, the
		// settlement may have given units back, even when its answer
		// was lost or not confirmed: forgetting too much is safe.
		c.denials.givenBack(ref.Tag)
	}
	switch {
	case errors.Is(err, limiter.ErrHoldNotFound):
		return Settlement{}, tollgate.Errorf(tollgate.ENOTFOUND, "no such hold (unknown, or settled or expired over an hour ago)")
	case errors.Is(err, limiter.ErrHoldConflict) && st.Status == limiter.HoldOpen:
		return Settlement{}, tollgate.Errorf(tollgate.ECONFLICT, "the hold has expired")
	case errors.Is(err, limiter.ErrHoldConflict):
		c.recordSettled(id, ref, st)
		return Settlement{}, tollgate.Errorf(tollgate.ECONFLICT, "the hold was %s at cost %d", holdStatus(st.Status), st.Cost)
	case err != nil:
		// As for checks, a store outage is no server error: the caller
		// may retry, and a repeated settlement is harmless.
		c.storeFailed(ctx, err)
		return Settlement{}, tollgate.Errorf(tollgate.EUNAVAILABLE, "the limiter store did not answer; retry the settlement")
	}
	c.recordSettled(id, ref, st)
	return Settlement{HoldID: id, Estimate: st.Estimate, Cost: st.Cost, Status: holdStatus(st.Status), Repeated: st.Repeated}, nil
}

// creditsNow returns the terms of the prepaid balance of the tenant a
// hold is for, as this process's snapshot has them now (what a check
// sent now would carry), for its settlement to draw on: since the hold's
// check the balance may have been topped up or adjusted, or its overdraft
// or mode changed. Nil when the snapshot holds no such tenant or no
// balance of it: the store then settles on the terms the hold's check
// carried, the best left to go by.
func (c *Checker) creditsNow(ref holdRef) *limiter.Credits {
	s := c.holder.Current()
	if s == nil {
		return nil
	}
	tenant := s.Tenant(ref.TenantID)
	if tenant == nil || tenant.Credits == nil {
		return nil
	}
	return c.creditsFor(tenant.Credits, string(statekey.AppendCredits(nil, c.prefix, tenant.Tag, tenant.Short)))
}

// recordSettled counts the units hold id finally counts, once it is
// settled or expired, at the time of the check that opened it (its
// request's minute and month, which the hold's draw on a prepaid balance
// and its spend cap's window count too; a record of an earlier version
// without that time counts at the settlement): once per hold however
// often it is called (the usage pipeline keeps one event per HoldHash).
func (c *Checker) recordSettled(id string, ref holdRef, st limiter.Settlement) {
	expired := st.Status == limiter.HoldRefunded || st.Status == limiter.HoldCharged
	reason := tollgate.ReasonOK
	if expired {
		reason = tollgate.ReasonHoldExpired
	}
	at := st.OpenedUS
	if at == 0 {
		at = st.NowUS
	}
	c.recorder.Record(tollgate.UsageEvent{AtUS: at, TenantID: ref.TenantID, KeyID: ref.KeyID, Tier: ref.Tier,
		IP: ref.IP, Resource: ref.Resource, Cost: st.Cost, Allowed: true, Reason: reason,
		Hold: tollgate.HoldSettled, Expired: expired, HoldHash: holdHash(id), Recorded: st.Recorded})
}

// usageResource is the resource usage counts a check under: its route, or
// tollgate.ResourceAny for a check that named none (as the aggregator
// counts it).
func usageResource(route string) string {
	if route == "" {
		return tollgate.ResourceAny
	}
	return route
}

// anonymousIP is the address usage keeps of a caller of tier: an
// anonymous caller's, none for a caller with a key.
func anonymousIP(tier, ip string) string {
	if tier == tollgate.TierAnonymous {
		return ip
	}
	return ""
}

// holdHash returns the name usage knows hold id by: the first 16 bytes of
// its SHA-256, in hex. The ID itself, which carries the caller, stays out
// of the usage stream and tables.
func holdHash(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:16])
}

// ExpireHolds expires the holds past their expiry, up to max, as each
// says (refund or charge), and counts their usage; it returns how many it
// expired.
func (c *Checker) ExpireHolds(ctx context.Context, max int) (int, error) {
	if c.settler == nil {
		return 0, nil
	}
	expired, err := c.settler.ExpireDue(ctx, max)
	for _, e := range expired {
		if ref, ok := parseHoldID(e.ID); ok {
			c.denials.givenBack(ref.Tag)
			c.recordSettled(e.ID, ref, e.Settlement)
		}
	}
	if err != nil {
		return len(expired), fmt.Errorf("enforce: expire holds: %w", err)
	}
	return len(expired), nil
}

// RunHoldExpiry expires due holds every interval until ctx ends, logging
// failures as an outage of the store (once when it starts, every 10 s
// while it lasts, once when it ends); several processes may run it on
// one store.
func (c *Checker) RunHoldExpiry(ctx context.Context, interval time.Duration, log *slog.Logger) {
	mon := backoff.NewMonitor(backoff.MonitorConfig{Component: "hold_expiry", Dependency: "limiter store", Log: log})
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			n, err := c.ExpireHolds(ctx, 100)
			if err != nil {
				if ctx.Err() == nil {
					mon.Failure(err)
				}
				break
			}
			mon.Success()
			if n < 100 {
				break
			}
		}
	}
}
