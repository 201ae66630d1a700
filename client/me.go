package client

import (
	"context"
	"fmt"
	"net/http"

	"github.com/tollgate/tollgate"
)

// Standing is where an API key stands now with every rule of its plan:
// the answer of GET /v1/me.
type Standing = tollgate.Standing

// RuleStanding is one rule of the plan and what it has left now.
type RuleStanding = tollgate.RuleStanding

// QuotaStanding is the calendar month's units against the plan's
// included units. Mode "shadow" is an overage quota: units beyond it are
// billed, and Used counts them too.
type QuotaStanding = tollgate.QuotaStanding

// CreditsStanding is the tenant's prepaid balance now, when its plan
// draws on credits (Standing.Credits).
type CreditsStanding = tollgate.CreditsStanding

// Me returns where apiKey stands now (GET /v1/me): its tenant, plan and
// every rule with what it has left. The key authenticates the request
// itself (Authorization: Bearer); the client's service token is not sent.
// Looking consumes nothing. Errors: a *ProblemError for 401 (unknown key),
// 403 (revoked or expired key, suspended tenant), 429 (more than 60 looks
// a minute per key; RetryAfter says when to look again) and 503 (the
// limiter store is unavailable), or a wrapped transport or decoding
// error. Unlike Check, a failure is never decided by FailMode.
func (c *Client) Me(ctx context.Context, apiKey string) (*Standing, error) {
	var st Standing
	if _, err := roundTrip(ctx, c.http, c.timeout, http.MethodGet, c.baseURL+"/v1/me", apiKey, nil, nil, &st, maxDecisionBody); err != nil {
		return nil, fmt.Errorf("tollgate: me: %w", err)
	}
	return &st, nil
}
