package metering

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/tollgate/tollgate"
)

// JournalClaimField is the field of a claimed usage journal that names the
// claim (its batch ID's tail); no usage field starts with '#'.
const JournalClaimField = "#"

// JournalBatch returns the batch with ID id that a claimed usage journal
// holds: fields is the journal hash as the check scripts and settle.lua
// wrote it (statekey.go lays it out), JournalClaimField aside. Its rows
// are admitted decisions (reason ok), its settlements one per hold. A
// field it cannot read fails the whole batch, which is then set aside
// with its fields as they were.
func JournalBatch(id string, createdUS int64, fields map[string]string) (Batch, error) {
	b := Batch{Version: 1, ID: id, CreatedUS: createdUS}
	type rowKey struct{ minute, row string }
	units, delta := map[rowKey]int64{}, map[rowKey]int64{}
	for f, v := range fields {
		if f == JournalClaimField {
			continue
		}
		n, numErr := strconv.ParseInt(v, 10, 64)
		switch {
		case f == "":
			return Batch{}, fmt.Errorf("usage journal: an empty field")
		case f[0] == 's':
			st, err := journalSettlement(f[1:], v)
			if err != nil {
				return Batch{}, err
			}
			b.Settlements = append(b.Settlements, st)
		case f[0] == 'd' || (f[0] >= '0' && f[0] <= '9'):
			into := units
			if f[0] == 'd' {
				into, f = delta, f[1:]
			}
			minute, row, ok := strings.Cut(f, "\x00")
			if !ok || numErr != nil {
				return Batch{}, fmt.Errorf("usage journal: field %q = %q is not minute NUL row → units", f, v)
			}
			into[rowKey{minute, row}] += n
		default:
			return Batch{}, fmt.Errorf("usage journal: unknown field %q", f)
		}
	}
	keys := make([]rowKey, 0, len(units)+len(delta))
	for k := range units {
		keys = append(keys, k)
	}
	for k := range delta {
		if _, ok := units[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].minute+keys[i].row < keys[j].minute+keys[j].row })
	for _, k := range keys {
		r, err := journalRow(k.minute, k.row)
		if err != nil {
			return Batch{}, err
		}
		r.AllowedUnits = units[k]
		r.Allowed = units[k] + delta[k]
		if r.Allowed == 0 && r.AllowedUnits == 0 {
			continue
		}
		b.Rows = append(b.Rows, r)
	}
	sort.Slice(b.Settlements, func(i, j int) bool { return b.Settlements[i].HoldHash < b.Settlements[j].HoldHash })
	return b, b.validate()
}

// journalRow returns the row (reason ok, no counts) of minute (seconds,
// decimal) and row (statekey.UsageRow).
func journalRow(minute, row string) (Row, error) {
	m, err := strconv.ParseInt(minute, 10, 64)
	parts := strings.Split(row, "\x00")
	if err != nil || len(parts) != 4 {
		return Row{}, fmt.Errorf("usage journal: row %q of minute %q is not tenant NUL key NUL tier NUL resource", row, minute)
	}
	return Row{Minute: m, TenantID: parts[0], KeyID: parts[1], Tier: parts[2], Resource: parts[3], Reason: tollgate.ReasonOK}, nil
}

// journalSettlement reads a hold's entry: minute NUL cost NUL expired NUL
// ip NUL row.
func journalSettlement(hash, v string) (Settlement, error) {
	parts := strings.SplitN(v, "\x00", 5)
	if len(parts) != 5 {
		return Settlement{}, fmt.Errorf("usage journal: hold %q's entry %q is not minute NUL cost NUL expired NUL ip NUL row", hash, v)
	}
	r, err := journalRow(parts[0], parts[4])
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
