package billing

import (
	"encoding/csv"
	"io"
	"strconv"
	"strings"
	"time"
)

// CSVHeader names the columns WriteCSV writes.
var CSVHeader = []string{"tenant_id", "tenant", "month", "status", "currency", "line", "plan", "from", "to",
	"key_id", "key_prefix", "resource", "allowed", "denied", "units", "denied_units", "unit_minor", "amount_minor"}

// WriteCSV writes statements as CSV for spreadsheets: a header, then per
// statement one "usage" line per key and resource, per plan span a
// "base_fee", an "included" (units included), a "used" (units used), for
// a tenant with prepaid credits a "credit_units" (units of the used ones
// that drew on the balance, not billed) and a "credit_overage" (units
// admitted past the balance, billed in the overage), and one "overage"
// line per price tier; then for a tenant with credits the month's
// "credits_granted", "credits_used", "credits_expired",
// "credits_adjusted", "credits_overage", "credits_unpaid" (settled past
// the balance in deny mode, not billed), "credits_opening" and
// "credits_closing" (balances) in units; then a "total" line. Amounts are
// integer minor units; empty cells do not apply to the line.
func WriteCSV(w io.Writer, statements []Statement) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(CSVHeader); err != nil {
		return err
	}
	i64 := func(n int64) string { return strconv.FormatInt(n, 10) }
	ts := func(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
	for _, st := range statements {
		line := func(kind string, cells map[string]string) error {
			row := make([]string, len(CSVHeader))
			base := map[string]string{"tenant_id": st.TenantID, "tenant": safeCell(st.TenantName), "month": st.Month,
				"status": st.Status, "currency": st.Currency, "line": kind}
			for i, col := range CSVHeader {
				if v, ok := cells[col]; ok {
					row[i] = v
				} else {
					row[i] = base[col]
				}
			}
			return cw.Write(row)
		}
		for _, l := range st.Lines {
			if err := line("usage", map[string]string{"key_id": l.KeyID, "key_prefix": l.KeyPrefix,
				"resource": safeCell(l.Resource), "allowed": i64(l.Allowed), "denied": i64(l.Denied),
				"units": i64(l.AllowedUnits), "denied_units": i64(l.DeniedUnits)}); err != nil {
				return err
			}
		}
		for _, p := range st.Plans {
			span := map[string]string{"plan": safeCell(p.Plan), "from": ts(p.From), "to": ts(p.To)}
			with := func(extra map[string]string) map[string]string {
				out := map[string]string{}
				for k, v := range span {
					out[k] = v
				}
				for k, v := range extra {
					out[k] = v
				}
				return out
			}
			if err := line("base_fee", with(map[string]string{"amount_minor": i64(p.BaseFeeMinor)})); err != nil {
				return err
			}
			if err := line("included", with(map[string]string{"units": i64(p.IncludedUnits)})); err != nil {
				return err
			}
			if err := line("used", with(map[string]string{"units": i64(p.UsedUnits)})); err != nil {
				return err
			}
			if st.Credits != nil {
				if err := line("credit_units", with(map[string]string{"units": i64(p.CreditUnits)})); err != nil {
					return err
				}
				if err := line("credit_overage", with(map[string]string{"units": i64(p.CreditOverageUnits)})); err != nil {
					return err
				}
			}
			for _, o := range p.Overage {
				if err := line("overage", with(map[string]string{"units": i64(o.Units),
					"unit_minor": i64(o.UnitMinor), "amount_minor": i64(o.AmountMinor)})); err != nil {
					return err
				}
			}
		}
		if c := st.Credits; c != nil {
			for _, l := range []struct {
				kind  string
				units int64
			}{{"credits_granted", c.Granted}, {"credits_used", c.Used}, {"credits_expired", c.Expired},
				{"credits_adjusted", c.Adjusted}, {"credits_overage", c.Overage}, {"credits_unpaid", c.Unpaid},
				{"credits_opening", c.Opening}, {"credits_closing", c.Closing}} {
				if err := line(l.kind, map[string]string{"units": i64(l.units)}); err != nil {
					return err
				}
			}
		}
		if err := line("total", map[string]string{"amount_minor": i64(st.TotalMinor)}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// safeCell keeps a text cell from being read as a formula by spreadsheet
// programs (CSV injection): a value starting with =, +, -, @, tab or CR
// gets a leading apostrophe. Tenant names and resources come from
// outside, so they are treated this way; numbers are written as they are.
func safeCell(s string) string {
	if s != "" && strings.ContainsRune("=+-@\t\r", rune(s[0])) {
		return "'" + s
	}
	return s
}
