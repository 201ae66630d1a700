package limiter

// RuleState is the stored state a rule was decided on, as a store reports
// it for a check it did not admit when the batch asks (Batch.ReportState).
// Between two admissions a rule's state only moves towards "more used"
// (admissions consume; time only replenishes), so a later check of the
// same rule and key that Decide denies on this state, at a time no
// earlier than the store's clock, is one the store would deny too.
type RuleState struct {
	// Known is false when the algorithm's state is not reported (the
	// sliding window log, whose state is every admitted unit).
	Known bool
	// A, B, C by algorithm: gcra and leaky_bucket: A the theoretical
	// arrival time; token_bucket: A the tokens (µs of refill, or whole
	// units without refill) measured at B; fixed_window: A the window
	// start, B its count; sliding_window_counter: A the window index, B its
	// count, C the previous window's count.
	A, B, C int64
}

// NewRuleState returns the state of algorithm alg from the three numbers a
// store reported.
func NewRuleState(alg Algorithm, a, b, c int64) RuleState {
	if alg == SlidingWindowLog || !alg.Valid() {
		return RuleState{}
	}
	return RuleState{Known: true, A: a, B: b, C: c}
}

func (rs RuleState) state(alg Algorithm) *state {
	switch alg {
	case GCRA, LeakyBucket:
		return &state{tat: rs.A}
	case TokenBucket:
		return &state{tokens: rs.A, stamp: rs.B}
	case FixedWindow:
		return &state{window: rs.A, count: rs.B}
	case SlidingWindowCounter:
		return &state{window: rs.A, count: rs.B, prev: rs.C}
	}
	return nil
}

// observe returns the state p is decided on at now, given the stored
// state st (nil when absent), as the Redis script reports it.
func observe(p Params, st *state, now int64) RuleState {
	switch p.Algorithm {
	case GCRA, LeakyBucket:
		tat := now
		if st != nil && st.tat > now {
			tat = st.tat
		}
		return RuleState{Known: true, A: tat}
	case TokenBucket:
		unit := p.EmissionInterval()
		refills := unit > 0
		if !refills {
			unit = 1
		}
		capacity := unit * p.EffectiveBurst()
		available := capacity
		if st != nil {
			available = st.tokens
			if refills {
				available = min(capacity, available+(now-st.stamp))
			}
		}
		return RuleState{Known: true, A: available, B: now}
	case FixedWindow:
		var start, count int64
		if p.AnchorFirstRequest {
			start = now
			if st != nil && now < st.window+p.PeriodUS {
				start, count = st.window, st.count
			}
		} else {
			start, _ = windowBounds(p, now)
			if st != nil && st.window == start {
				count = st.count
			}
		}
		return RuleState{Known: true, A: start, B: count}
	case SlidingWindowCounter:
		index := FloorDiv(now, p.PeriodUS)
		var curr, prev int64
		if st != nil {
			switch st.window {
			case index:
				curr, prev = st.count, st.prev
			case index - 1:
				prev = st.count
			}
		}
		return RuleState{Known: true, A: index, B: curr, C: prev}
	}
	return RuleState{}
}

// Decide evaluates p on the reported state st at now (µs) for cost units,
// exactly as a store holding that state would; st must be Known.
func Decide(p Params, st RuleState, now, cost int64) Result {
	return evaluate(p, st.state(p.Algorithm), now, cost).Result
}
