package tollgate_test

import (
	"testing"

	"github.com/tollgate/tollgate"
)

// TestMinorDigits: ISO 4217's minor units, for the currencies that have
// no decimals, three or four, and for the many with two.
func TestMinorDigits(t *testing.T) {
	for _, tc := range []struct {
		currencies []string
		want       int
	}{
		{[]string{"BIF", "CLP", "DJF", "GNF", "ISK", "JPY", "KMF", "KRW", "PYG", "RWF", "UGX", "UYI", "VND", "VUV", "XAF", "XOF", "XPF"}, 0},
		{[]string{"USD", "EUR", "GBP", "CHF", "HUF", "TWD", "MGA", "MRU", "IDR", "INR", "CNY", "XYZ", ""}, 2},
		{[]string{"BHD", "IQD", "JOD", "KWD", "LYD", "OMR", "TND"}, 3},
		{[]string{"CLF", "UYW"}, 4},
	} {
		for _, c := range tc.currencies {
			if got := tollgate.MinorDigits(c); got != tc.want {
				t.Errorf("MinorDigits(%q) = %d, want %d", c, got, tc.want)
			}
		}
	}
}
