package statekey

// The records of the exchange between regions (docs/regions.md), one of
// each kind per hash tag, beside the states of the tag:
//
//	prefix "{" tag "}" kind
//
// with kind one byte: 'x' the outbox (a hash: what checks admitted on
// global rules since the exchanger last claimed it, written by
// check.lua), 'y' the outbox as the exchanger claimed it, until the
// other regions have it, 's' the last sequence applied from each
// other region (a hash by region name), 'a' the allotment table (a hash:
// per state key of a global_split window, the units the rebalancer moved
// to this region, negative for units moved away, beside the equal share)
// and 'd' the demand table (a hash: per such state key, the units its
// checks asked for since the rebalancer last read it). A state key is longer (a rule
// and a scope follow the tag), so none of them is ever one.
const (
	outboxRecord  = 'x'
	claimedOutbox = 'y'
	appliedRecord = 's'
	allotments    = 'a'
	demandRecord  = 'd'
)

// OutboxKey returns the outbox of hash tag tag under prefix.
func OutboxKey(prefix string, tag byte) string { return tagged(prefix, tag, outboxRecord) }

// ClaimedKey returns the claimed outbox of hash tag tag under prefix.
func ClaimedKey(prefix string, tag byte) string { return tagged(prefix, tag, claimedOutbox) }

// AppliedKey returns the hash of the last sequence applied from each
// other region to hash tag tag's states, under prefix (and, in field
// '#claimed', the last sequence a claim of the tag's outbox took).
func AppliedKey(prefix string, tag byte) string { return tagged(prefix, tag, appliedRecord) }

// AllotmentKey returns the allotment table of hash tag tag under prefix.
func AllotmentKey(prefix string, tag byte) string { return tagged(prefix, tag, allotments) }

// DemandKey returns the demand table of hash tag tag under prefix.
func DemandKey(prefix string, tag byte) string { return tagged(prefix, tag, demandRecord) }
