// Package metering is the check server's side of usage: it counts every
// check decision and hands the counts on, without touching Postgres.
//
// An Aggregator in each API process (it satisfies enforce.Recorder) sums
// decisions in memory by minute and dimensions and publishes one Batch per
// flush interval through a Producer: a RedisProducer appending to a Redis
// Stream, or, in single-process mode, usage.StoreProducer writing to
// Postgres directly. Batch, with its rows and Counts, is the wire type
// both stages share: the ingest stage (package usage) reads the stream and
// applies each batch exactly once; package billing then prices and closes
// months from what was applied. Metering stays apart from usage so that
// the check server's counting links no Postgres code.
//
// docs/usage.md describes the guarantees and the rules for rounding and
// proration.
package metering

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tollgate/tollgate"
)

// Batch is what one producer flush publishes: counts of decisions by
// minute and dimensions. ID is unique per batch (producer ID and sequence)
// and is what makes applying it idempotent.
type Batch struct {
	// Version of the wire format; 1.
	Version int    `json:"v"`
	ID      string `json:"id"`
	// CreatedUS is when the batch was cut (µs since the epoch, producer's
	// clock; informational).
	CreatedUS int64   `json:"created_us"`
	Rows      []Row   `json:"rows"`
	IPs       []IPRow `json:"ips,omitempty"`
	// Crossings are the quota thresholds checks crossed since the last
	// batch (tollgate.UsageEvent.Crossed); the worker records each once.
	Crossings []Crossing `json:"crossings,omitempty"`
	// Settlements are the holds settled or expired since the last batch,
	// kept apart from Rows: the same hold may come in several batches (a
	// settlement retried on another process, an expiry racing it), and
	// the worker counts each hold once. A batch without them (older
	// producers) counts its settlements in Rows.
	Settlements []Settlement `json:"settlements,omitempty"`
}

// Settlement is the usage of one hold's settlement or expiry
// (tollgate.UsageEvent with Hold HoldSettled): units without a decision.
type Settlement struct {
	// HoldHash names the hold: 32 lowercase hex digits
	// (tollgate.UsageEvent.HoldHash).
	HoldHash string `json:"hold"`
	// Minute is the settlement's minute start, in seconds since the epoch.
	Minute   int64  `json:"minute"`
	TenantID string `json:"tenant_id,omitempty"`
	KeyID    string `json:"key_id,omitempty"`
	Tier     string `json:"tier"`
	// IP is the anonymous caller's address ("" for a caller with a key).
	IP       string `json:"ip,omitempty"`
	Resource string `json:"resource"`
	// Cost is the units the hold finally counts.
	Cost int64 `json:"cost"`
	// Expired is set for a hold that expired unsettled (reason
	// hold_expired).
	Expired bool `json:"expired,omitempty"`
}

// Row returns the row s counts in: AllowedUnits of its cost, and one
// expired hold when it expired.
func (s Settlement) Row() Row {
	r := Row{Minute: s.Minute, TenantID: s.TenantID, KeyID: s.KeyID, Tier: s.Tier, Resource: s.Resource,
		Reason: tollgate.ReasonOK, Counts: Counts{AllowedUnits: s.Cost}}
	if s.Expired {
		r.Reason, r.ExpiredHolds = tollgate.ReasonHoldExpired, 1
	}
	return r
}

// MaxBatchSettlements bounds a batch's Settlements.
const MaxBatchSettlements = 100_000

// Crossing is one quota threshold a check took a tenant's month-to-date
// count past: Units is the threshold, AtUS the check's time (its UTC month
// is the month crossed).
type Crossing struct {
	TenantID string `json:"tenant_id"`
	Units    int64  `json:"units"`
	AtUS     int64  `json:"at_us"`
}

// Row counts decisions of one minute with the same dimensions.
type Row struct {
	// Minute is the minute's start, in seconds since the epoch (a multiple
	// of 60).
	Minute   int64  `json:"minute"`
	TenantID string `json:"tenant_id,omitempty"` // "" when none (anonymous, unknown key)
	KeyID    string `json:"key_id,omitempty"`    // "" when none
	Tier     string `json:"tier"`
	Resource string `json:"resource"`
	Reason   string `json:"reason"`
	// DeniedBy names the rules that denied, comma-separated; "" when
	// allowed.
	DeniedBy string `json:"denied_by,omitempty"`
	Counts
}

// IPRow counts anonymous decisions of one minute from one IP address, or
// from every address outside that minute's top list (IP OtherIP).
type IPRow struct {
	Minute int64  `json:"minute"`
	IP     string `json:"ip"`
	Counts
}

// OtherIP is the IP of the row that sums the addresses outside a minute's
// top list.
const OtherIP = "other"

// OtherResource replaces the resource of decisions recorded while the
// aggregator was at its row limit: their counts stay exact per tenant and
// key, only the resource detail is lost. It is the resource of checks
// that matched none of their plan's routes, and what a tenant's resources
// beyond its monthly cap are folded into (usage.StoreConfig.ResourceCap).
const OtherResource = tollgate.ResourceOther

// Counts are decisions and units, split by outcome (tollgate.Counts, the
// record the admin API and the SDK share).
type Counts = tollgate.Counts

// Decisions returns the number of decisions the batch counts.
func (b *Batch) Decisions() int64 {
	var n int64
	for _, r := range b.Rows {
		n += r.Decisions()
	}
	return n
}

// Encode returns the batch's wire form (JSON).
func (b *Batch) Encode() ([]byte, error) {
	b.Version = 1
	return json.Marshal(b)
}

// DecodeBatch parses and validates a batch's wire form. A batch that fails
// here, whole or in any part, is refused whole; the usage worker reads
// batches with SplitBatch instead, which refuses the bad parts alone.
func DecodeBatch(data []byte) (Batch, error) {
	b, refused, err := SplitBatch(data)
	if err != nil {
		return Batch{}, err
	}
	if refused.Parts > 0 {
		return Batch{}, fmt.Errorf("usage: batch %q: %w", b.ID, refused.Err())
	}
	return b, nil
}

// SplitBatch parses a batch's wire form and splits it into what can be
// applied and what never can: each row, address row, settlement or
// crossing that fails validation is taken out of b and into refused with
// its reason, so that one bad row cannot hold back the usage of every
// tenant in its batch. b keeps the batch's ID, and applying it records
// that ID as any batch does. err is set, b is zero, and refused describes
// the whole batch when the batch itself is unusable (not JSON, an unknown
// version, no ID, too many settlements): then nothing of it applies.
func SplitBatch(data []byte) (b Batch, refused Refused, err error) {
	if err := json.Unmarshal(data, &b); err != nil {
		err = fmt.Errorf("usage: decode batch: %w", err)
		return Batch{}, Refused{Reasons: []string{err.Error()}, Payload: data}, err
	}
	if err := b.validateHead(); err != nil {
		err = fmt.Errorf("usage: batch %q: %w", b.ID, err)
		return Batch{}, Refused{BatchID: b.ID, Parts: b.Parts(), Reasons: []string{err.Error()}, Payload: data}, err
	}
	ok, out := b.split()
	if out.Parts() == 0 {
		return b, Refused{}, nil
	}
	refused = Refused{BatchID: b.ID, Parts: out.Parts()}
	for _, reason := range out.reasons {
		refused.add(reason)
	}
	out.batch.Version, out.batch.ID, out.batch.CreatedUS = b.Version, b.ID, b.CreatedUS
	if refused.Payload, err = json.Marshal(out.batch); err != nil {
		return Batch{}, Refused{}, fmt.Errorf("usage: batch %q: encode its refused parts: %w", b.ID, err)
	}
	return ok, refused, nil
}

// Parts returns how many rows, address rows, settlements and crossings b
// holds.
func (b *Batch) Parts() int {
	return len(b.Rows) + len(b.IPs) + len(b.Settlements) + len(b.Crossings)
}

// Refused is what of a batch (or of a claimed usage journal) can never be
// applied, set aside by the usage worker in usage_bad_batches.
type Refused struct {
	// BatchID names the batch ("" when it could not be read).
	BatchID string
	// Parts counts the parts refused: rows, address rows, settlements and
	// crossings, or a journal's entries.
	Parts int
	// Reasons says why, naming each part (rows[3], a journal's entry), at
	// most maxReasons of them; Err adds how many more there were.
	Reasons []string
	// Payload holds the refused parts in their wire form: a batch's JSON
	// (its ID, only those parts), a journal's entries, or the whole
	// payload when the batch itself was refused.
	Payload []byte
}

// maxReasons bounds Refused.Reasons: the first reasons tell what went
// wrong; thousands of them (a batch of broken rows) would only bloat the
// record.
const maxReasons = 20

// add notes one more reason, keeping the first maxReasons.
func (r *Refused) add(reason string) {
	if len(r.Reasons) < maxReasons {
		r.Reasons = append(r.Reasons, reason)
	}
}

// Err returns the reasons as one error, nil when nothing was refused.
func (r Refused) Err() error {
	if r.Parts == 0 && len(r.Reasons) == 0 {
		return nil
	}
	msg := strings.Join(r.Reasons, "; ")
	if more := r.Parts - len(r.Reasons); more > 0 && len(r.Reasons) == maxReasons {
		msg += fmt.Sprintf("; and %d more", more)
	}
	return errors.New(msg)
}

// validate reports the first problem of b, whole or in any part.
func (b *Batch) validate() error {
	if err := b.validateHead(); err != nil {
		return err
	}
	if _, out := b.split(); out.Parts() > 0 {
		return errors.New(out.reasons[0])
	}
	return nil
}

// validateHead checks what belongs to the batch as a whole.
func (b *Batch) validateHead() error {
	if b.Version != 1 {
		return fmt.Errorf("unknown version %d", b.Version)
	}
	if b.ID == "" || len(b.ID) > 200 {
		return fmt.Errorf("batch ID must be 1–200 characters")
	}
	if len(b.Settlements) > MaxBatchSettlements {
		return fmt.Errorf("%d settlements, more than %d", len(b.Settlements), MaxBatchSettlements)
	}
	return nil
}

// refusedParts collects the parts split takes out of a batch.
type refusedParts struct {
	batch   Batch
	reasons []string
}

func (r *refusedParts) Parts() int { return r.batch.Parts() }

// split returns b without the parts that fail validation, and those
// parts with their reasons. b's own slices are left as they were: when
// nothing is refused, ok shares them.
func (b *Batch) split() (ok Batch, out refusedParts) {
	ok = *b
	if rows, bad := keepValid(b.Rows, "rows", Row.validate, &out.reasons); bad != nil {
		ok.Rows, out.batch.Rows = rows, bad
	}
	if ips, bad := keepValid(b.IPs, "ips", IPRow.validate, &out.reasons); bad != nil {
		ok.IPs, out.batch.IPs = ips, bad
	}
	if sts, bad := keepValid(b.Settlements, "settlements", Settlement.validate, &out.reasons); bad != nil {
		ok.Settlements, out.batch.Settlements = sts, bad
	}
	if cs, bad := keepValid(b.Crossings, "crossings", Crossing.validate, &out.reasons); bad != nil {
		ok.Crossings, out.batch.Crossings = cs, bad
	}
	return ok, out
}

// keepValid returns the items of list that validate, and, when some do
// not, those apart (bad not nil), each reason appended to reasons under
// the item's name (name[i]). When all are valid it returns list itself.
func keepValid[T any](list []T, name string, validate func(T) error, reasons *[]string) (good, bad []T) {
	for i, item := range list {
		err := validate(item)
		if err == nil {
			if bad != nil {
				good = append(good, item)
			}
			continue
		}
		if bad == nil {
			good = append(make([]T, 0, len(list)-1), list[:i]...)
		}
		bad = append(bad, item)
		*reasons = append(*reasons, fmt.Sprintf("%s[%d]: %v", name, i, err))
	}
	if bad == nil {
		return list, nil
	}
	return good, bad
}

func (r Row) validate() error {
	if err := validMinute(r.Minute); err != nil {
		return err
	}
	for name, id := range map[string]string{"tenant": r.TenantID, "key": r.KeyID} {
		if id != "" && !tollgate.IsUUID(id) {
			return fmt.Errorf("%s ID %q is not a UUID", name, id)
		}
	}
	if r.Tier == "" || r.Reason == "" || r.Resource == "" {
		return fmt.Errorf("tier, reason and resource are required")
	}
	for name, v := range map[string]string{"tier": r.Tier, "reason": r.Reason, "resource": r.Resource, "denied_by": r.DeniedBy} {
		if !storableText(v) {
			return fmt.Errorf("%s is not valid UTF-8 text without NUL", name)
		}
	}
	return validCounts(r.Counts)
}

func (r IPRow) validate() error {
	if err := validMinute(r.Minute); err != nil {
		return err
	}
	if r.IP == "" || !storableText(r.IP) {
		return fmt.Errorf("ip is required, as text without NUL")
	}
	return validCounts(r.Counts)
}

func (c Crossing) validate() error {
	if !tollgate.IsUUID(c.TenantID) || c.Units < 1 {
		return fmt.Errorf("a tenant ID and units ≥ 1 are required")
	}
	return validMinute(c.AtUS / 60_000_000 * 60)
}

func (s Settlement) validate() error {
	if !isHoldHash(s.HoldHash) {
		return fmt.Errorf("hold %q is not 32 lowercase hex digits", s.HoldHash)
	}
	if err := validMinute(s.Minute); err != nil {
		return err
	}
	for name, id := range map[string]string{"tenant": s.TenantID, "key": s.KeyID} {
		if id != "" && !tollgate.IsUUID(id) {
			return fmt.Errorf("%s ID %q is not a UUID", name, id)
		}
	}
	if s.Tier == "" || s.Resource == "" {
		return fmt.Errorf("tier and resource are required")
	}
	for name, v := range map[string]string{"tier": s.Tier, "resource": s.Resource, "ip": s.IP} {
		if !storableText(v) {
			return fmt.Errorf("%s is not valid UTF-8 text without NUL", name)
		}
	}
	if s.Cost < 0 || s.Cost > maxRowCount {
		return fmt.Errorf("cost %d is not between 0 and %d", s.Cost, int64(maxRowCount))
	}
	return nil
}

// isHoldHash reports whether h is 32 lowercase hex digits.
func isHoldHash(h string) bool {
	if len(h) != 32 {
		return false
	}
	for i := range len(h) {
		if c := h[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func validMinute(m int64) error {
	// Between 2000 and 2200: anything else is a broken producer clock.
	if m%60 != 0 || m < 946_684_800 || m > 7_258_118_400 {
		return fmt.Errorf("minute %d is not a minute start between 2000 and 2200", m)
	}
	return nil
}

// maxRowCount bounds each count of one row: far above any real minute
// (2^40 ≈ 10^12), and low enough that sums over millions of batches
// cannot overflow int64. A row that would pass it is never built: the
// aggregator and the journal's reader start a second row of the same
// dimensions instead (fits), and the worker merges rows of the same
// dimensions before it writes them.
const maxRowCount = 1 << 40

func validCounts(c Counts) error {
	if c.Allowed < 0 || c.Denied < 0 || c.AllowedUnits < 0 || c.DeniedUnits < 0 || c.ExpiredHolds < 0 {
		return fmt.Errorf("negative counts")
	}
	if !fits(Counts{}, c) {
		return fmt.Errorf("counts above %d in one row", int64(maxRowCount))
	}
	return nil
}

// fits reports whether adding c to a row's counts r keeps every count
// within maxRowCount (r within it, c not negative).
func fits(r, c Counts) bool {
	return c.Allowed <= maxRowCount-r.Allowed && c.Denied <= maxRowCount-r.Denied &&
		c.AllowedUnits <= maxRowCount-r.AllowedUnits && c.DeniedUnits <= maxRowCount-r.DeniedUnits &&
		c.ExpiredHolds <= maxRowCount-r.ExpiredHolds
}

// joinRules joins rule names for Row.DeniedBy without allocating in the
// common cases (none or one).
func joinRules(names []string) string {
	switch len(names) {
	case 0:
		return ""
	case 1:
		return names[0]
	}
	return strings.Join(names, ",")
}

// storableText reports whether Postgres can store s as text: valid UTF-8
// without NUL characters.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}
