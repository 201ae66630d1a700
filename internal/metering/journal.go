package metering

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate"
)

// JournalRow is a row's sum in a usage journal.
type JournalRow struct {
	Row    string // statekey.UsageRow
	Minute int64  // seconds since the epoch
}

// ParseJournal reads a usage journal as the check scripts and settle.lua
// append it (statekey.go lays it out): the decisions and units of each
// row and minute, and the value of each hold's entry (the first, should
// one come twice).
func ParseJournal(raw string) (rows map[JournalRow]Counts, holds map[string]string, err error) {
	rows, holds = map[JournalRow]Counts{}, map[string]string{}
	err = journalEntries(raw, func(f, v string) error {
		switch {
		case strings.HasPrefix(f, "s"):
			if _, ok := holds[f[1:]]; !ok {
				holds[f[1:]] = v
			}
		case strings.HasPrefix(f, "r"):
			k, units, err := journalCheck(f, v)
			if err != nil {
				return err
			}
			c := rows[k]
			c.Allowed++
			c.AllowedUnits += units
			rows[k] = c
		default:
			return fmt.Errorf("usage journal: unknown field %q", f)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return rows, holds, nil
}

// journalEntries calls fn with each entry of raw, a field and its value,
// in order, until fn fails. It fails on a part that is not
// length-prefixed: nothing after it can be read.
func journalEntries(raw string, fn func(field, value string) error) error {
	for len(raw) > 0 {
		f, rest, err := journalPart(raw)
		if err != nil {
			return err
		}
		v, rest, err := journalPart(rest)
		if err != nil {
			return err
		}
		if err := fn(f, v); err != nil {
			return err
		}
		raw = rest
	}
	return nil
}

// journalCheck reads a check's entry: its row and minute, and its units.
func journalCheck(f, v string) (JournalRow, int64, error) {
	at := strings.LastIndexByte(f, 0)
	if at < 0 {
		return JournalRow{}, 0, fmt.Errorf("usage journal: entry %q = %q is not a row, its minute and units", f, v)
	}
	minute, merr := strconv.ParseInt(f[at+1:], 10, 64)
	units, uerr := strconv.ParseInt(v, 10, 64)
	if merr != nil || uerr != nil || units < 0 {
		return JournalRow{}, 0, fmt.Errorf("usage journal: entry %q = %q is not a row, its minute and units", f, v)
	}
	return JournalRow{Row: f[1:at], Minute: minute}, units, nil
}

// journalPart reads one length-prefixed part off raw.
func journalPart(raw string) (part, rest string, err error) {
	i := strings.IndexByte(raw, ':')
	n, perr := strconv.Atoi(raw[:max(i, 0)])
	if i <= 0 || perr != nil || n < 0 || n > len(raw)-i-1 {
		return "", "", fmt.Errorf("usage journal: no length-prefixed part at %.40q", raw)
	}
	return raw[i+1 : i+1+n], raw[i+1+n:], nil
}

// appendJournalEntry appends the entry of field f and value v to dst in
// the journal's own form.
func appendJournalEntry(dst []byte, f, v string) []byte {
	dst = strconv.AppendInt(dst, int64(len(f)), 10)
	dst = append(append(dst, ':'), f...)
	dst = strconv.AppendInt(dst, int64(len(v)), 10)
	return append(append(dst, ':'), v...)
}

// JournalBatch returns the batch with ID id that a claimed usage journal
// raw holds, as SplitJournal does, but fails when any entry is refused.
func JournalBatch(id string, createdUS int64, raw string) (Batch, error) {
	b, refused, err := SplitJournal(id, createdUS, raw)
	if err != nil {
		return Batch{}, err
	}
	if refused.Parts > 0 {
		return Batch{}, refused.Err()
	}
	return b, nil
}

// SplitJournal returns the batch with ID id that a claimed usage journal
// raw holds, and the entries of it that can never be applied. Its rows
// are admitted decisions (reason ok), a row and minute's entries summed
// into as few rows as hold them within a row's bound (a journal holds
// minutes of usage after a Postgres outage, and 1,100 checks of the check
// API's largest cost pass it), its settlements one per hold. An entry
// that is no check's or hold's, or whose row or hold a batch may not
// hold, is refused alone (Refused: those entries in the journal's form,
// and why), so that it cannot hold back the rest of its tag's usage. err
// is set only when raw cannot be read (a part that is not
// length-prefixed), and then nothing of it applies.
func SplitJournal(id string, createdUS int64, raw string) (b Batch, refused Refused, err error) {
	b = Batch{Version: 1, ID: id, CreatedUS: createdUS}
	if err := b.validateHead(); err != nil {
		err = fmt.Errorf("usage journal: %w", err)
		return Batch{}, Refused{BatchID: id, Reasons: []string{err.Error()}, Payload: []byte(raw)}, err
	}
	// rows holds each row and minute's counts, the last one open; bad,
	// the reason each row and minute's entries are refused ("" when they
	// are not).
	rows := map[JournalRow][]Counts{}
	bad := map[JournalRow]string{}
	holds := map[string]bool{}
	refuse := func(f, v, reason string) {
		refused.Parts++
		refused.add(reason)
		refused.Payload = appendJournalEntry(refused.Payload, f, v)
	}
	err = journalEntries(raw, func(f, v string) error {
		switch {
		case strings.HasPrefix(f, "s"):
			if holds[f[1:]] {
				return nil // a hold counts once: its first entry
			}
			holds[f[1:]] = true
			st, err := journalSettlement(f[1:], v)
			if err == nil {
				err = st.validate()
			}
			if err != nil {
				refuse(f, v, fmt.Sprintf("hold %q: %v", f[1:], err))
				return nil
			}
			b.Settlements = append(b.Settlements, st)
		case strings.HasPrefix(f, "r"):
			k, units, err := journalCheck(f, v)
			if err != nil {
				refuse(f, v, err.Error())
				return nil
			}
			reason, seen := bad[k]
			if !seen {
				if r, err := journalRow(k.Minute, k.Row); err != nil {
					reason = err.Error()
				} else if err := r.validate(); err != nil {
					reason = fmt.Sprintf("row %q at %d: %v", k.Row, k.Minute, err)
				}
				bad[k] = reason
			}
			c := Counts{Allowed: 1, AllowedUnits: units}
			if reason == "" && !fits(Counts{}, c) {
				reason = fmt.Sprintf("row %q at %d: %d units in one check, more than a row holds", k.Row, k.Minute, units)
			}
			if reason != "" {
				refuse(f, v, reason)
				return nil
			}
			list := rows[k]
			if last := len(list) - 1; last >= 0 && fits(list[last], c) {
				list[last].Add(c)
			} else {
				rows[k] = append(list, c)
			}
		default:
			refuse(f, v, fmt.Sprintf("usage journal: unknown field %q", f))
		}
		return nil
	})
	if err != nil {
		return Batch{}, Refused{BatchID: id, Reasons: []string{err.Error()}, Payload: []byte(raw)}, err
	}
	keys := make([]JournalRow, 0, len(rows))
	for k := range rows {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].Minute != keys[j].Minute {
			return keys[i].Minute < keys[j].Minute
		}
		return keys[i].Row < keys[j].Row
	})
	for _, k := range keys {
		r, _ := journalRow(k.Minute, k.Row) // read above
		for _, c := range rows[k] {
			r.Counts = c
			b.Rows = append(b.Rows, r)
		}
	}
	sort.Slice(b.Settlements, func(i, j int) bool { return b.Settlements[i].HoldHash < b.Settlements[j].HoldHash })
	if len(b.Settlements) > MaxBatchSettlements {
		// More holds than a batch may carry: refused whole, as before.
		err := fmt.Errorf("usage journal: %d settlements, more than %d", len(b.Settlements), MaxBatchSettlements)
		return Batch{}, Refused{BatchID: id, Parts: b.Parts(), Reasons: []string{err.Error()}, Payload: []byte(raw)}, err
	}
	if refused.Parts > 0 {
		refused.BatchID = id
	}
	return b, refused, nil
}

// journalRow returns the row (reason ok, no counts) of minute (seconds)
// and row (statekey.UsageRow).
func journalRow(minute int64, row string) (Row, error) {
	parts := strings.Split(row, "\x00")
	if len(parts) != 4 {
		return Row{}, fmt.Errorf("usage journal: row %q is not tenant NUL key NUL tier NUL resource", row)
	}
	return Row{Minute: minute, TenantID: parts[0], KeyID: parts[1], Tier: parts[2], Resource: parts[3], Reason: tollgate.ReasonOK}, nil
}

// journalSettlement reads a hold's entry: minute NUL cost NUL expired NUL
// ip NUL row. The settlement is not validated.
func journalSettlement(hash, v string) (Settlement, error) {
	parts := strings.SplitN(v, "\x00", 5)
	if len(parts) != 5 {
		return Settlement{}, fmt.Errorf("usage journal: hold %q's entry %q is not minute NUL cost NUL expired NUL ip NUL row", hash, v)
	}
	minute, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return Settlement{}, fmt.Errorf("usage journal: hold %q's entry %q has no minute", hash, v)
	}
	r, err := journalRow(minute, parts[4])
	if err != nil {
		return Settlement{}, err
	}
	cost, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || (parts[2] != "0" && parts[2] != "1") {
		return Settlement{}, fmt.Errorf("usage journal: hold %q's entry %q has no cost and expired flag", hash, v)
	}
	return Settlement{HoldHash: hash, Minute: r.Minute, TenantID: r.TenantID, KeyID: r.KeyID, Tier: r.Tier, IP: parts[3],
		Resource: r.Resource, Cost: cost, Expired: parts[2] == "1"}, nil
}
