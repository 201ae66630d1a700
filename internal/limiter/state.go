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
	// TAT is the theoretical arrival time (µs) of gcra and leaky_bucket.
	TAT int64
	// Tokens are token_bucket's available tokens, in µs of refill (whole
	// units for a bucket that never refills), measured at TokensAtUS.
	Tokens, TokensAtUS int64
	// Window is fixed_window's window start (µs) and
	// sliding_window_counter's window index; Count the units counted in
	// that window.
	Window, Count int64
	// Previous is sliding_window_counter's count of the previous window.
	Previous int64
}

// NewRuleState returns the state of algorithm alg from the three numbers a
// store reports for it, in this order: gcra and leaky_bucket the TAT;
// token_bucket the tokens and when they were measured; fixed_window the
// window start and count; sliding_window_counter the window index, count
// and previous count. Numbers an algorithm does not use are ignored.
func NewRuleState(alg Algorithm, first, second, third int64) RuleState {
	switch alg {
	case GCRA, LeakyBucket:
		return RuleState{Known: true, TAT: first}
	case TokenBucket:
		return RuleState{Known: true, Tokens: first, TokensAtUS: second}
	case FixedWindow:
		return RuleState{Known: true, Window: first, Count: second}
	case SlidingWindowCounter:
		return RuleState{Known: true, Window: first, Count: second, Previous: third}
	}
	return RuleState{}
}

func (rs RuleState) state(p Params) *state {
	switch p.Algorithm {
	case GCRA, LeakyBucket:
		return &state{tat: rs.TAT}
	case TokenBucket:
		return &state{tokens: rs.Tokens, stamp: rs.TokensAtUS, once: p.EmissionInterval() == 0}
	case FixedWindow:
		return &state{window: rs.Window, count: rs.Count}
	case SlidingWindowCounter:
		return &state{window: rs.Window, count: rs.Count, prev: rs.Previous}
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
		return RuleState{Known: true, TAT: tat}
	case TokenBucket:
		unit := p.EmissionInterval()
		refills := unit > 0
		if !refills {
			unit = 1
		}
		available := st.tokensAt(refills, unit*p.EffectiveBurst(), now)
		return RuleState{Known: true, Tokens: available, TokensAtUS: now}
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
		return RuleState{Known: true, Window: start, Count: count}
	case SlidingWindowCounter:
		index := FloorDiv(now, p.PeriodUS)
		curr, prev := st.windowCounts(index)
		return RuleState{Known: true, Window: index, Count: curr, Previous: prev}
	}
	return RuleState{}
}

// Decide evaluates p on the reported state st at now (µs) for cost units,
// exactly as a store holding that state would; st must be Known.
func Decide(p Params, st RuleState, now, cost int64) Result {
	return evaluate(p, st.state(p), now, cost).Result
}
