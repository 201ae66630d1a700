package stripe

import (
	"fmt"
	"math"
	"strings"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/billing"
)

// Tollgate counts money in the minor unit of ISO 4217 (docs/usage.md,
// tollgate.MinorDigits); Stripe's API counts it in its own "smallest
// unit", which is the same for every currency but these. Getting one of
// them wrong bills 100 times too much or too little, so every amount
// crosses the boundary through toStripe or fromStripe.
const (
	// iskScale: Stripe kept ISK two-decimal in its API (100 is one
	// króna) when it became zero-decimal everywhere else, and takes
	// only whole krónur, which ×100 always gives.
	iskScale = 100
	// mgaScale: ISO 4217 gives the ariary two decimals; Stripe takes it
	// zero-decimal, so only whole ariary can be charged.
	mgaScale = 100
)

// threeDecimal reports whether ISO 4217 gives currency three decimals.
// Stripe takes such amounts (BHD, JOD, KWD, OMR and TND are the ones it
// supports) only when the last digit is 0: its payment partners settle
// them to the hundredth.
func threeDecimal(currency string) bool { return tollgate.MinorDigits(currency) == 3 }

// toStripe returns Stripe's amount for minor, an amount in currency's
// ISO 4217 minor units. An amount that Stripe would refuse, or that it
// could not represent, is an error wrapping billing.ErrAmountNotAccepted
// that names the currency and the amount; nothing is rounded, since the
// statement is what the tenant owes.
func toStripe(currency string, minor int64) (int64, error) {
	currency = strings.ToUpper(currency)
	switch {
	case currency == "ISK":
		if minor > math.MaxInt64/iskScale || minor < math.MinInt64/iskScale {
			return 0, fmt.Errorf("stripe: %w: ISK %d is too large for Stripe's two-decimal ISK", billing.ErrAmountNotAccepted, minor)
		}
		return minor * iskScale, nil
	case currency == "MGA":
		if minor%mgaScale != 0 {
			return 0, fmt.Errorf("stripe: %w: MGA %d minor units is not a whole number of ariary, which is all Stripe takes",
				billing.ErrAmountNotAccepted, minor)
		}
		return minor / mgaScale, nil
	case threeDecimal(currency) && minor%10 != 0:
		return 0, fmt.Errorf("stripe: %w: %s %d minor units does not end in 0, as Stripe requires of three-decimal currencies",
			billing.ErrAmountNotAccepted, currency, minor)
	}
	return minor, nil
}

// fromStripe returns amount, an amount of Stripe's in currency, in ISO
// 4217 minor units: toStripe undone. An amount with no such value (ISK
// with fractions of a króna, from an invoice not made by Tollgate) is an
// error rather than a rounded value.
func fromStripe(currency string, amount int64) (int64, error) {
	switch strings.ToUpper(currency) {
	case "ISK":
		if amount%iskScale != 0 {
			return 0, fmt.Errorf("stripe: Stripe's ISK amount %d is not a whole number of krónur", amount)
		}
		return amount / iskScale, nil
	case "MGA":
		if amount > math.MaxInt64/mgaScale || amount < math.MinInt64/mgaScale {
			return 0, fmt.Errorf("stripe: Stripe's MGA amount %d is too large", amount)
		}
		return amount * mgaScale, nil
	}
	return amount, nil
}
