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
	for len(raw) > 0 {
		var f, v string
		if f, raw, err = journalPart(raw); err == nil {
			v, raw, err = journalPart(raw)
		}
		if err != nil {
			return nil, nil, err
		}
		switch {
		case strings.HasPrefix(f, "s"):
			if _, ok := holds[f[1:]]; !ok {
				holds[f[1:]] = v
			}
		case strings.HasPrefix(f, "r"):
			at := strings.LastIndexByte(f, 0)
			minute, merr := strconv.ParseInt(f[at+1:], 10, 64)
			units, uerr := strconv.ParseInt(v, 10, 64)
			if at < 0 || merr != nil || uerr != nil || units < 0 {
				return nil, nil, fmt.Errorf("usage journal: entry %q = %q is not a row, its minute and units", f, v)
			}
			k := JournalRow{Row: f[1:at], Minute: minute}
			c := rows[k]
			c.Allowed++
			c.AllowedUnits += units
			rows[k] = c
		default:
			return nil, nil, fmt.Errorf("usage journal: unknown field %q", f)
		}
	}
	return rows, holds, nil
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

// JournalBatch returns the batch with ID id that a claimed usage journal
// raw holds. Its rows are admitted decisions (reason ok), its settlements
// one per hold. An entry it cannot read fails the whole batch, which is
// then set aside as it was.
func JournalBatch(id string, createdUS int64, raw string) (Batch, error) {
	b := Batch{Version: 1, ID: id, CreatedUS: createdUS}
	rows, holds, err := ParseJournal(raw)
	if err != nil {
		return Batch{}, err
	}
	for hash, v := range holds {
		st, err := journalSettlement(hash, v)
		if err != nil {
			return Batch{}, err
		}
		b.Settlements = append(b.Settlements, st)
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
		r, err := journalRow(k.Minute, k.Row)
		if err != nil {
			return Batch{}, err
		}
		r.Counts = rows[k]
		b.Rows = append(b.Rows, r)
	}
	sort.Slice(b.Settlements, func(i, j int) bool { return b.Settlements[i].HoldHash < b.Settlements[j].HoldHash })
	return b, b.validate()
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
// ip NUL row.
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
