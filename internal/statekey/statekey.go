// Package statekey lays out the names of limiter state keys: the parts
// that the snapshot computes once per plan, tenant and key, and the parts
// that a check adds per caller.
package statekey

import (
	"crypto/sha256"
	"encoding/hex"
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate/internal/limiter"
)

// Limiter state keys are short and partly binary, because Redis keeps a
// key's name with every key: a GCRA state key of at most 14 bytes costs 56
// bytes (MEMORY USAGE), one of 15–30 bytes 72.
//
//	prefix "{" tag "}" rule scope
//
//   - tag: one byte (never "{" or "}"): the Redis Cluster hash tag, shared
//     by every key of one check. For a caller with an API key it comes
//     from the tenant, for an anonymous caller from the IP address, so
//     tenants and IPs spread over 254 slots.
//   - rule: three bytes naming the rule's state: two bits of storage kind
//     (string, hash, sorted set, so that two rules can never meet on one
//     key with different types) and 22 bits of a hash of plan ID, rule
//     name and algorithm; distinct within every plan (the snapshot salts RuleID until it is).
//   - scope: per API key five bytes (40 bits of a hash of the key ID); per
//     tenant five bytes of the tenant ID's; per IP address within a tenant
//     those five bytes and the address (AppendAddr: 4 bytes for IPv4, 17
//     for an IPv6 /64). An anonymous caller's scope is its address alone.
//
// With the default prefix "tg:" a per-key or per-tenant state key is 14
// bytes, an anonymous IPv4 one 13. Hashes of random UUIDs make two keys of
// one tenant share a state with a chance of about 2^-41 per pair.
//
// Beside a check's states, under the same hash tag, are the records of
// the holds and leases it opens:
//
//	prefix "{" tag "}" kind hash
//
// where kind is one byte ('h' a hold, 'l' a lease) and hash the hex of 16
// bytes of the SHA-256 of the hold or lease ID (HoldKey, LeaseKey).

// Short is 40 bits of a hash of an ID: the scope part of a state key.
type Short [5]byte

// idHash returns the stable FNV-1a hash of s (the same on every process).
func idHash(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// Compact returns the hash tag byte and the short ID of a tenant or key
// ID.
func Compact(id string) (tag byte, short Short) {
	h := idHash(id)
	for i := range short {
		short[i] = byte(h >> (8 * i))
	}
	return tagByte(h >> 40), short
}

// tagByte maps v onto the 254 bytes that may stand in a hash tag.
func tagByte(v uint64) byte {
	b := byte(v % 254)
	if b >= '{' {
		b++
	}
	if b >= '}' {
		b++
	}
	return b
}

// storageKind is the Redis type an algorithm keeps its state in.
func storageKind(a limiter.Algorithm) uint32 {
	switch a {
	case limiter.GCRA, limiter.LeakyBucket, limiter.TokenBucket:
		return 0 // string
	case limiter.SlidingWindowLog:
		return 2 // sorted set
	}
	return 1 // hash
}

// RuleID returns the three bytes that name a rule's state, salted
// (salt > 0) when an earlier rule of the plan took the unsalted one.
func RuleID(planID int64, name string, alg limiter.Algorithm, salt int) [3]byte {
	s := strconv.FormatInt(planID, 10) + ":" + name + ":" + string(alg)
	if salt > 0 {
		s += "#" + strconv.Itoa(salt)
	}
	v := uint32(idHash(s))&(1<<22-1) | storageKind(alg)<<22
	return [3]byte{byte(v >> 16), byte(v >> 8), byte(v)}
}

// TenantMonthID returns the rule ID of the state, named after rule, that
// counts a tenant's calendar month: the same on every plan (plan ID 0,
// which no plan has), so that the month's count is the tenant's and
// survives a change of plan. The snapshot keeps the monthly quota and
// the spend cap both on the monthly quota's.
func TenantMonthID(rule string) [3]byte {
	return RuleID(0, rule, limiter.FixedWindow, 0)
}

// TenantMonthKey returns the state key, under prefix, of the rule named
// rule that counts tenantID's calendar month (TenantMonthID): the key a
// check of the tenant writes. For the monthly quota its state is a fixed
// window, a hash of the month's start (window, µs since the epoch) and
// the units admitted in it (count).
func TenantMonthKey(prefix, tenantID, rule string) string {
	tag, short := Compact(tenantID)
	id := TenantMonthID(rule)
	b := make([]byte, 0, len(prefix)+3+len(id)+len(short))
	return string(AppendKey(b, prefix, tag, id, short[:], nil))
}

// AppendKey appends to b the state key, under prefix and hash tag tag, of
// rule (its RuleID) for the caller of an API key: scope is the short ID
// (Short) of the key, for a per-key rule, or of its tenant, per tenant
// and per IP address, which appends addr too (as AppendAddr lays it out;
// nil for the others).
func AppendKey(b []byte, prefix string, tag byte, rule [3]byte, scope, addr []byte) []byte {
	b = append(b, prefix...)
	b = append(b, '{', tag, '}')
	b = append(b, rule[:]...)
	b = append(b, scope...)
	return append(b, addr...)
}

// AppendAnonymousKey appends to b the state key, under prefix, of rule
// for an anonymous caller at addr (as AppendAddr lays it out): its hash
// tag is the address's (IPTag), its scope the address.
func AppendAnonymousKey(b []byte, prefix string, rule [3]byte, addr []byte) []byte {
	b = append(b, prefix...)
	b = append(b, '{', IPTag(addr), '}')
	b = append(b, rule[:]...)
	return append(b, addr...)
}

// Tag returns the hash tag byte of key, a state key (or a record's)
// under prefix; 0 for a key too short to be one.
func Tag(prefix, key string) byte {
	if len(key) < len(prefix)+3 {
		return 0
	}
	return key[len(prefix)+1]
}

// TagOf returns the hash tag byte of key, a state key or a record's under
// any prefix (a prefix has no braces): the byte after its first "{"; 0 for
// a key with none.
func TagOf(key string) byte {
	i := strings.IndexByte(key, '{')
	if i < 0 || i+1 >= len(key) {
		return 0
	}
	return key[i+1]
}

// ProbeKey returns the key, under prefix, that probes of the store peek
// at: no rule's state, so a probe changes nothing a check reads.
func ProbeKey(prefix string) string {
	return prefix + "{tollgate}:probe"
}

// The kinds of the records that sit beside a check's states.
const (
	holdRecord  = 'h'
	leaseRecord = 'l'
)

// HoldKey returns the key, under prefix and hash tag tag, of the record
// of the hold named id. Every byte of id counts: an ID altered in any
// part names another record.
func HoldKey(prefix string, tag byte, id string) string {
	return recordKey(prefix, tag, holdRecord, id)
}

// LeaseKey returns the key, under prefix and hash tag tag, of the record
// of the lease named id; it differs from HoldKey's of the same ID.
func LeaseKey(prefix string, tag byte, id string) string {
	return recordKey(prefix, tag, leaseRecord, id)
}

// recordKey writes the tag as its one byte, as the states' keys do, so
// that a record shares its states' Cluster hash slot.
func recordKey(prefix string, tag, kind byte, id string) string {
	sum := sha256.Sum256([]byte(id))
	return prefix + "{" + string([]byte{tag}) + "}" + string(kind) + hex.EncodeToString(sum[:16])
}

// LegacyHoldKey and LegacyLeaseKey return where releases before this
// layout kept the record of a hold or lease whose tag is 0x80 or more:
// they wrote the tag as the UTF-8 of its rune, two bytes, which on a
// Cluster named another slot than the states' (so there the check
// failed), and on a single server worked. A settlement, renewal or
// release that finds no record at the key of now looks there too, so
// that what was opened before an upgrade can still be settled. They
// return "" for a tag below 0x80, whose key never changed.
func LegacyHoldKey(prefix string, tag byte, id string) string {
	return legacyRecordKey(prefix, tag, holdRecord, id)
}

// LegacyLeaseKey: see LegacyHoldKey.
func LegacyLeaseKey(prefix string, tag byte, id string) string {
	return legacyRecordKey(prefix, tag, leaseRecord, id)
}

func legacyRecordKey(prefix string, tag, kind byte, id string) string {
	if tag < 0x80 {
		return ""
	}
	sum := sha256.Sum256([]byte(id))
	return prefix + "{" + string(rune(tag)) + "}" + string(kind) + hex.EncodeToString(sum[:16])
}

// AppendAddr appends the bytes of a caller's address: 4 for IPv4, 16 for
// IPv6, 17 for an IPv6 network (enforce.Network groups IPv6 callers by
// prefix: its 16 bytes and the prefix length); anything else as its text.
func AppendAddr(b []byte, ip string) []byte {
	if ip == "" {
		return b
	}
	if a, err := netip.ParseAddr(ip); err == nil {
		a = a.Unmap()
		if a.Is4() {
			v4 := a.As4()
			return append(b, v4[:]...)
		}
		v6 := a.As16()
		return append(b, v6[:]...)
	}
	if p, err := netip.ParsePrefix(ip); err == nil {
		p = p.Masked()
		v6 := p.Addr().Unmap().As16()
		return append(append(b, v6[:]...), byte(p.Bits()))
	}
	return append(b, ip...)
}

// IPTag returns the hash tag byte of an anonymous caller's address (as
// AppendAddr lays it out).
func IPTag(ip []byte) byte {
	h := uint64(14695981039346656037)
	for _, b := range ip {
		h ^= uint64(b)
		h *= 1099511628211
	}
	return tagByte(h >> 40)
}

// The rule IDs of a tenant's prepaid balance: storage kind 3, which no
// rule has, so no rule's state can meet them.
var (
	creditCounterID = [3]byte{0xC0, 0, 1}
	creditLogID     = [3]byte{0xC0, 0, 2}
)

// AppendCredits appends to b the two state keys of a tenant's prepaid
// balance, of equal length: its counter, then its consumption log.
// SplitCredits takes them apart again.
func AppendCredits(b []byte, prefix string, tag byte, short Short) []byte {
	b = AppendKey(b, prefix, tag, creditCounterID, short[:], nil)
	return AppendKey(b, prefix, tag, creditLogID, short[:], nil)
}

// SplitCredits returns the counter and consumption log keys of keys, the
// two keys of a balance as AppendCredits appended them.
func SplitCredits(keys string) (counter, log string) {
	half := len(keys) / 2
	return keys[:half], keys[half:]
}

// SeedKey returns the key, under prefix, of the seed marker of hash tag
// tag: while it exists the tag's tallies (the tenants' months,
// TenantMonthKey) were not lost since they were rebuilt from the rollups
// (limiter.SeedKeyOf derives it from a state key; the two agree).
func SeedKey(prefix string, tag byte) string {
	return prefix + "{" + string([]byte{tag}) + "}seeded"
}

// SeedKeys returns the seed markers of every hash tag under prefix, one
// per tag byte (254).
func SeedKeys(prefix string) []string {
	keys := make([]string, 0, 254)
	for _, tag := range Tags() {
		keys = append(keys, SeedKey(prefix, tag))
	}
	return keys
}

// The usage journal. A check script that admits a check with a usage
// entry head (limiter.Batch.Usage, UsageEntry) records the check in a
// journal in the same call, and settle.lua a hold's final units, so that
// what was admitted outlives the process that asked: the usage worker
// claims each tag's journal (JournalKey) and applies it as a batch. A
// journal is a string of entries, each a field and a value, each written
// as its length in bytes (decimal), ':' and itself; a script call appends
// its entries at once. A field is one of:
//
//   - "r" row NUL minute, one admitted check, the value its units (a hold's
//     check: 0, its units count at settlement); row is UsageRow, minute
//     the start of the check's minute in seconds since the epoch, ten
//     digits;
//   - "s" hash, one hold's settlement or expiry (its hash is the usage
//     pipeline's name of the hold), the value minute NUL cost NUL expired
//     (0 or 1) NUL ip NUL row.
//
// A row's entries add up, one decision each; a hold's come once. NUL
// separates the parts of a field or value: no part may hold it (the usage
// tables refuse it too). A call's entries go to the journal of its first
// journaling check's tag (on a Cluster, every check of a call shares one
// slot).
const (
	journalRecord = 'u' // the journal checks write
	claimedRecord = 'U' // the journal the worker claimed, being applied
	journalSeq    = 'q' // the claims' sequence and current claim's name
)

// JournalKey returns the usage journal of hash tag tag under prefix.
func JournalKey(prefix string, tag byte) string { return tagged(prefix, tag, journalRecord) }

// ClaimedJournalKey returns where the usage worker moves tag's journal
// while it applies it.
func ClaimedJournalKey(prefix string, tag byte) string { return tagged(prefix, tag, claimedRecord) }

// JournalSeqKey returns the hash that numbers tag's claimed journals.
func JournalSeqKey(prefix string, tag byte) string { return tagged(prefix, tag, journalSeq) }

func tagged(prefix string, tag, kind byte) string {
	return prefix + "{" + string([]byte{tag}) + "}" + string(kind)
}

// Tags returns every hash tag byte (254: all but '{' and '}').
func Tags() []byte {
	tags := make([]byte, 0, 254)
	for b := range 256 {
		if b != '{' && b != '}' {
			tags = append(tags, byte(b))
		}
	}
	return tags
}

// UsageRow returns the row of the usage journal a check's decision counts
// in: tenant, key, tier and resource, NUL between them (tenant and key
// "" when none).
func UsageRow(tenantID, keyID, tier, resource string) string {
	return tenantID + "\x00" + keyID + "\x00" + tier + "\x00" + resource
}

// journalMinuteDigits is the width of an entry's minute (seconds since
// the epoch, zero-padded: ten digits last until 2286).
const journalMinuteDigits = 10

// UsageEntry returns the head of the journal entry of a check of its
// row (UsageRow of the same parts): its field's length and the field up
// to the minute, which the script adds with the units. It is built in one
// allocation: the check path calls it for every check; EntryRow reads the
// row back out of it.
func UsageEntry(tenantID, keyID, tier, resource string) string {
	rowLen := len(tenantID) + len(keyID) + len(tier) + len(resource) + 3
	field := strconv.Itoa(1 + rowLen + 1 + journalMinuteDigits)
	var b strings.Builder
	b.Grow(len(field) + 2 + rowLen + 1)
	b.WriteString(field)
	b.WriteString(":r")
	for i, part := range [...]string{tenantID, keyID, tier, resource} {
		if i > 0 {
			b.WriteByte(0)
		}
		b.WriteString(part)
	}
	b.WriteByte(0)
	return b.String()
}

// EntryRow returns the row (UsageRow) of entry, a UsageEntry, without a
// copy.
func EntryRow(entry string) string {
	i := strings.IndexByte(entry, ':')
	return entry[i+2 : len(entry)-1]
}

// HoldUsage returns what a hold's record keeps for its settlement's entry
// in the journal: the hold's hash (32 hex digits), then the anonymous
// caller's address NUL the check's row.
func HoldUsage(hash, ip, row string) string { return hash + ip + "\x00" + row }

// JournalKeyOf returns the usage journal of the hash tag of key, a state
// key or a record's (JournalKey under key's prefix); "" for a key without
// a hash tag.
func JournalKeyOf(key string) string {
	i := strings.IndexByte(key, '{')
	if i < 0 || i+2 >= len(key) || key[i+2] != '}' {
		return ""
	}
	return key[:i+3] + string(rune(journalRecord))
}
