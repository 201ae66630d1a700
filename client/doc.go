// Package client is Tollgate's Go SDK: a typed client of the check API
// (POST /v1/check), net/http middleware that protects a service with it,
// and a small client of the admin API. It uses the standard library and,
// for the APIs' vocabulary (reasons, tiers) and the records the server and
// the SDK share (tenants, usage counts, settlements, standings…), the root
// package tollgate, which uses the standard library only; nothing
// internal.
//
// # Checking a request
//
// A [Client] asks the check API whether a caller may make a request now:
//
//	tg, err := client.New("http://tollgate:8080", serviceToken, client.Options{})
//	...
//	d, err := tg.Check(ctx, client.CheckRequest{Key: apiKey, IP: ip, Resource: "GET /repos"})
//
// Every decision of the server, allowed or not, is a [Decision]; err is
// non-nil only when the check was refused (a [*ProblemError]: a bad
// service token, an invalid IP…, or a refusal of something in between,
// such as a WAF's 403), the answer was not a decision, or ctx ended. A Cost of 0 means 1, the
// server's default: set Peek to consume nothing. A Client is safe for
// concurrent use and holds one tuned [http.Transport], so checks reuse
// connections: create one per process and share it.
//
// # Failure modes
//
// When the check API cannot be asked — it cannot be reached, times out
// (Options.Timeout, 500 ms by default), answers 5xx, or a proxy or load
// balancer in between answers 408 or 429 (the check API never answers a
// check with either) — the client decides by its [FailMode]: [FailOpen]
// (the default, like the server's rules) allows, [FailClosed] denies
// with reason [ReasonUnavailable]. Either way the decision says Degraded
// and carries the cause in Decision.Err; Check never panics and never
// returns an error for an outage.
//
//	answer of the check                       Check                 middleware
//	a decision                                the Decision          as it says
//	no answer, timeout, 5xx, 408, 429         FailMode's, Degraded  open: served; closed: 503
//	any other status (400, 401, 403, 404,
//	405, 409, 413, 422, 451…)                 a *ProblemError       500 (OnError)
//	a 2xx whose body is not a decision        an error              500 (OnError)
//
// Every other answer is an error, Tollgate's problem or not: the check
// API's refusal (400, 401, 413, 422), something in between refusing the
// check (a WAF's 403 on a body whose key looks like an attack, a 404 or
// 405 of a route that is not the check API's), or a 2xx that is not a
// decision (a 200 without allowed, reason and retry_after_ms). The
// middleware answers it with a 500 (MiddlewareOptions.OnError), whatever
// the FailMode: a caller who can provoke such an answer (a WAF blocks a
// body by what it contains) must not be let through past every limit,
// and a revoked or expired service token (401) makes every request a
// 500 — by design, since that is a service to fix, not an outage to ride
// out. A WAF in front of the check API should let /v1/check's bodies
// through unexamined: the API keys in them are the callers'.
//
// # Remembered denials
//
// A rate_limited or spend_cap denial whose retry_after_ms is positive
// means the same request cannot succeed before that time, unless units
// are given back or the rules change. The client remembers it, keyed by
// the exact (key, ip, resource, cost) of the request, and denies that
// request again locally, without a round trip, until the time has passed
// but for at most [MaxMemoryAge] (one second), then asks again: a wait
// may run for an hour or to the month's end, and a plan upgrade, a raised
// spend cap or a settlement elsewhere must not go unseen that long. One
// second is also how long the check API itself remembers a denial
// (maxDenialLife in internal/enforce). It never denies longer than it was
// told, since the wait is counted from before the request was sent.
//
// Settling a hold ([Client.Settle]) or releasing a lease
// ([Client.Release]) forgets at once the remembered denials of the same
// tenant (of the same address for an anonymous caller; of everyone for
// an ID this client was not given), since it gives units back. Not
// remembered at all: a denial by a concurrency rule (a slot frees
// whenever a request in flight ends, long before the wait, which is
// another lease's expiry), a degraded or unavailable answer (only a check
// tells when the limiter is back), credits_exhausted (no wait: until a
// top-up) and reasons the client does not know. Memory is bounded
// (Options.MemorySize entries, least recently used first out) and holds
// digests, not API keys. Such a decision has Remembered set and its
// Retry-After counts down the server's wait.
//
// # Protecting a service
//
// [Client.Middleware] wraps an [http.Handler] in the spirit of
// express-rate-limit: every request is checked with the caller's API key
// (Authorization: Bearer, then X-API-Key), its address (RemoteAddr; see
// [ForwardedFor] for proxies) and "METHOD /path" as the resource
// ([RouteResource]): the pattern of the route that will serve it (give the
// middleware your mux in MiddlewareOptions.Mux, or wrap the handlers you
// register), else its path decoded and cleaned, and HEAD counted as GET,
// so that neither /v1/%73earch, /v1//search nor a HEAD escapes the rule
// of the handler that serves it. The
// rate-limit headers of the decision (RateLimit-Policy, RateLimit,
// X-RateLimit-*, Retry-After) are copied to the response, the decision is
// put in the request's context ([DecisionFrom]), and a denial is answered
// with application/problem+json by [WriteDenied] or your OnLimited:
//
//	reason                            status
//	rate_limited                      429 Too Many Requests, with Retry-After
//	spend_cap                         429 Too Many Requests, with Retry-After
//	credits_exhausted                 402 Payment Required (no wait: until a top-up)
//	invalid_key, key_required         401 Unauthorized, with WWW-Authenticate
//	key_revoked, key_expired,
//	tenant_suspended                  403 Forbidden
//	unavailable                       503 Service Unavailable, with Retry-After
//	any other                         429 with a positive retry_after_ms, else 403
//
// The TypeScript SDK's middleware answers the same; the check API's
// forward-auth answers credits_exhausted with a 429, which gateways
// expect of every rate or quota denial. A key longer than [MaxKeyLength]
// is an invalid_key, refused without asking.
//
// # The admin API
//
// [AdminClient] covers what a service or a script needs from the admin API:
// logging in (email and password, or a session token you already have),
// plans, tenants, API keys, usage totals, statements and prepaid credits
// (grants and adjustments, safe to retry with an idempotency key: see
// [AdminClient.GrantCredits]). It is written by hand on the types of
// openapi.yaml rather than generated: a generator would add a build step
// and a runtime dependency to a package that needs neither, the surface
// is small (a dozen calls), and hand-written code reads like Go — context
// first, time.Time and plain strings instead of pointer-heavy structs,
// one [*ProblemError] naming the invalid fields for errors.As. For the
// rest of the admin API, send the session token ([AdminClient.Token])
// yourself; openapi.yaml describes every route.
package client
