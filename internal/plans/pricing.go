package plans

import (
	"math"
	"math/big"

	"github.com/tollgate/tollgate"
)

// OverageLine prices overage units FromUnit..ToUnit (1-based, inclusive)
// at UnitMinor each.
type OverageLine = tollgate.OverageLine

// overageTiers returns the tiers that price p's overage: its graduated
// tiers, or one open-ended tier at the flat price.
func (p Plan) overageTiers() []PriceTier {
	if len(p.Tiers) == 0 {
		return []PriceTier{{UnitMinor: p.OverageUnitMinor}}
	}
	return p.Tiers
}

// tierEnd returns the last overage unit tier i of tiers prices
// (math.MaxInt64 for the last tier, which prices everything beyond).
func tierEnd(tiers []PriceTier, i int) int64 {
	if tiers[i].UpTo == nil || i == len(tiers)-1 {
		return math.MaxInt64
	}
	return *tiers[i].UpTo
}

// PriceOverage prices units of overage on plan p, as statements do: flat
// at OverageUnitMinor per unit or, when p has tiers, graduated (each tier
// prices the units up to its UpTo; units beyond the last tier are priced
// at the last tier's price). An amount past int64 is EINVALID.
func PriceOverage(p Plan, units int64) ([]OverageLine, int64, error) {
	lines := []OverageLine{}
	if units <= 0 {
		return lines, 0, nil
	}
	tiers := p.overageTiers()
	var total, done int64
	for i, t := range tiers {
		upTo := min(tierEnd(tiers, i), units)
		if upTo <= done {
			continue
		}
		n := upTo - done
		amount, err := MulChecked(n, t.UnitMinor)
		if err != nil {
			return nil, 0, err
		}
		if total, err = AddChecked(total, amount); err != nil {
			return nil, 0, err
		}
		lines = append(lines, OverageLine{FromUnit: done + 1, ToUnit: upTo, Units: n, UnitMinor: t.UnitMinor, AmountMinor: amount})
		done = upTo
		if done >= units {
			break
		}
	}
	return lines, total, nil
}

// OverageUnitsWithin returns the most overage units p's pricing
// (PriceOverage) charges at most capMinor for, and false when there is no
// such bound (free units beyond some point: the cap never binds).
func OverageUnitsWithin(p Plan, capMinor int64) (int64, bool) {
	tiers := p.overageTiers()
	var units int64
	left := max(capMinor, 0)
	for i, t := range tiers {
		size := tierEnd(tiers, i) - units
		if size <= 0 {
			continue
		}
		if t.UnitMinor == 0 {
			if i == len(tiers)-1 {
				return 0, false
			}
			units += size
			continue
		}
		n := left / t.UnitMinor
		if n < size {
			return units + n, true
		}
		units += size
		left -= size * t.UnitMinor
	}
	return units, true
}

var errOverflow = tollgate.Errorf(tollgate.EINVALID, "an amount exceeds the largest representable value")

// MulChecked returns a × b (both non-negative), or EINVALID on overflow.
func MulChecked(a, b int64) (int64, error) {
	if a != 0 && b != 0 && a > (1<<63-1)/b {
		return 0, errOverflow
	}
	return a * b, nil
}

// AddChecked returns a + b (both non-negative), or EINVALID on overflow.
func AddChecked(a, b int64) (int64, error) {
	if a > (1<<63-1)-b {
		return 0, errOverflow
	}
	return a + b, nil
}

// Prorate returns amount × num / den rounded half-up (all non-negative),
// computed exactly: how statements prorate base fees and included units
// over the part of a month a plan was in force.
func Prorate(amount, num, den int64) int64 {
	if num == den {
		return amount
	}
	// (2·amount·num + den) / (2·den), in big integers: amount·num can
	// exceed int64 (a month is 2.6e12 µs).
	n := new(big.Int).Mul(big.NewInt(amount), big.NewInt(num))
	n.Mul(n, big.NewInt(2))
	n.Add(n, big.NewInt(den))
	n.Quo(n, new(big.Int).Mul(big.NewInt(den), big.NewInt(2)))
	return n.Int64()
}
