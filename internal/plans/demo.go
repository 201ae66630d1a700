package plans

import "github.com/tollgate/tollgate/internal/limiter"

// DemoPlans are the plans `admin seed demo` creates: GitHub-style hourly
// limits per tier and a search burst limit on pro, and GitHub-style
// routes that name their usage; and llm, an AI-style API priced in
// tokens: a tokens-per-minute rule checked with holds (an estimate such
// as max_tokens, settled at the tokens produced, refunded when the
// upstream fails) and at most 4 requests in flight per key. Prices are
// in cents.
func DemoPlans() []Plan {
	public := []string{"GET /repos", "GET /repos/{owner}/{repo}", "GET /users", "GET /users/{user}", "GET /orgs",
		"GET /orgs/{org}"}
	keyed := append(public[:len(public):len(public)], "GET /repos/{owner}/{repo}/issues", "GET /repos/{owner}/{repo}/issues/{number}",
		"POST /repos/{owner}/{repo}/issues", "POST /v1/search")
	hourly := func(limit int64, scope Scope) Rule {
		return Rule{Name: "hourly", Algorithm: limiter.GCRA, Limit: limit, PeriodUS: limiter.HourUS,
			Burst: limit, Resource: "*", Scope: scope, Mode: ModeEnforce, FailureMode: FailOpen}
	}
	return []Plan{
		{Name: AnonymousPlan, DisplayName: "Anonymous", Currency: "USD",
			Rules: []Rule{hourly(60, ScopeIP)}, Routes: public},
		{Name: "free", DisplayName: "Free", Currency: "USD", IncludedUnits: 1000,
			Rules: []Rule{hourly(1000, ScopeKey)}, Routes: keyed},
		{Name: "pro", DisplayName: "Pro", Currency: "USD", BaseFeeMinor: 4900, IncludedUnits: 100_000,
			OverageUnitMinor: 1,
			Rules: []Rule{
				hourly(5000, ScopeKey),
				{Name: "search", Algorithm: limiter.TokenBucket, Limit: 10, PeriodUS: limiter.SecondUS, Burst: 10,
					Resource: "POST /v1/search", Scope: ScopeKey, Mode: ModeEnforce, FailureMode: FailOpen},
			},
			Routes: keyed},
		{Name: "llm", DisplayName: "LLM API (tokens)", Currency: "USD", BaseFeeMinor: 2900, IncludedUnits: 10_000_000,
			Tiers: []PriceTier{{UpTo: ptr(int64(90_000_000)), UnitMinor: 0}, {UnitMinor: 1}},
			Rules: []Rule{
				{Name: "tokens", Algorithm: limiter.GCRA, Limit: 100_000, PeriodUS: limiter.MinuteUS, Burst: 100_000,
					Resource: "POST /v1/complete", Scope: ScopeKey, Mode: ModeEnforce, FailureMode: FailOpen,
					Options: Options{Hold: true, HoldTTLS: 300, RefundOn: []string{"5xx", "timeout"}}},
				{Name: "inflight", Algorithm: limiter.Concurrency, Limit: 4, PeriodUS: 30 * limiter.SecondUS,
					Resource: "POST /v1/complete", Scope: ScopeKey, Mode: ModeEnforce, FailureMode: FailOpen},
				{Name: "hourly", Algorithm: limiter.GCRA, Limit: 1000, PeriodUS: limiter.HourUS, Burst: 1000,
					Resource: "GET /*", Scope: ScopeKey, Mode: ModeEnforce, FailureMode: FailOpen},
			},
			Routes: []string{"POST /v1/complete", "GET /v1/models"}},
		{Name: "enterprise", DisplayName: "Enterprise", Currency: "USD", BaseFeeMinor: 49900,
			IncludedUnits: 1_000_000, Tiers: []PriceTier{{UpTo: ptr(int64(1_000_000)), UnitMinor: 1}, {UnitMinor: 0}},
			Rules: []Rule{hourly(15000, ScopeTenant)}, Routes: keyed},
	}
}

func ptr[T any](v T) *T { return &v }
