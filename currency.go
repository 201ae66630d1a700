package tollgate

// MinorDigits returns the number of decimals of currency's minor unit in
// ISO 4217: 2 for USD (cents), 0 for JPY, 3 for KWD, 4 for CLF. Money is
// counted in integer minor units everywhere, so an amount of minor units
// is amount / 10^MinorDigits major units. currency is an upper-case ISO
// 4217 code; codes the standard gives 2 decimals, and codes it does not
// list, have 2.
//
// Every piece of code that turns minor units into an amount a person or
// another system reads (the console, the payment provider's adapter)
// uses this one table, so that an amount means the same everywhere.
func MinorDigits(currency string) int {
	if d, ok := minorDigits[currency]; ok {
		return d
	}
	return 2
}

// minorDigits lists every currency of ISO 4217 (list one, current
// currencies and funds) whose minor unit is not 2 decimals. Codes the
// standard gives no minor unit (precious metals, XDR, test and
// "no currency" codes) are not listed.
var minorDigits = map[string]int{
	// No minor unit.
	"BIF": 0, "CLP": 0, "DJF": 0, "GNF": 0, "ISK": 0, "JPY": 0, "KMF": 0, "KRW": 0, "PYG": 0,
	"RWF": 0, "UGX": 0, "UYI": 0, "VND": 0, "VUV": 0, "XAF": 0, "XOF": 0, "XPF": 0,
	// Thousandths.
	"BHD": 3, "IQD": 3, "JOD": 3, "KWD": 3, "LYD": 3, "OMR": 3, "TND": 3,
	// Units of account with four decimals.
	"CLF": 4, "UYW": 4,
}
