package stripe

import (
	"errors"
	"testing"

	"github.com/tollgate/tollgate/internal/billing"
)

// TestToStripe: amounts cross to Stripe's unit as ISO 4217's minor units
// (tollgate.MinorDigits) and Stripe's exceptions say, and back.
func TestToStripe(t *testing.T) {
	for _, tc := range []struct {
		currency string
		minor    int64
		want     int64 // Stripe's amount; -1: refused
	}{
		{"USD", 4900, 4900},
		{"JPY", 4900, 4900},
		{"UGX", 50_000, 50_000}, // zero-decimal in ISO 4217 and at Stripe
		{"XOF", 5000, 5000},
		{"ISK", 4900, 490_000}, // zero-decimal in ISO 4217, two at Stripe
		{"MGA", 4900, 49},      // two in ISO 4217, none at Stripe
		{"MGA", 4950, -1},
		{"KWD", 12_340, 12_340},
		{"BHD", 1005, -1},
		{"IQD", 1005, -1}, // three-decimal as BHD is
		{"LYD", 1000, 1000},
	} {
		got, err := toStripe(tc.currency, tc.minor)
		switch {
		case tc.want < 0 && !errors.Is(err, billing.ErrAmountNotAccepted):
			t.Errorf("toStripe(%s, %d) = %d, %v; want ErrAmountNotAccepted", tc.currency, tc.minor, got, err)
		case tc.want >= 0 && (err != nil || got != tc.want):
			t.Errorf("toStripe(%s, %d) = %d, %v; want %d", tc.currency, tc.minor, got, err, tc.want)
		case tc.want >= 0:
			if back, err := fromStripe(tc.currency, got); err != nil || back != tc.minor {
				t.Errorf("fromStripe(%s, %d) = %d, %v; want %d", tc.currency, got, back, err, tc.minor)
			}
		}
	}
}
