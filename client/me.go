package client

import (
	"context"
	"fmt"
	"net/http"
)

// Standing is where an API key stands now with every rule of its plan:
// the answer of GET /v1/me.
type Standing struct {
	TenantID string         `json:"tenant_id"`
	Tenant   string         `json:"tenant"`
	KeyID    string         `json:"key_id"`
	Plan     string         `json:"plan"`
	Rules    []RuleStanding `json:"rules"`
	// Quota is nil when the plan has no monthly quota (quota_mode none).
	Quota *QuotaStanding `json:"quota,omitempty"`
}

// RuleStanding is one rule of the plan and what it has left now.
type RuleStanding struct {
	Name      string `json:"name"`
	Algorithm string `json:"algorithm"`
	// Mode is "enforce" or "shadow" (reported, never denies).
	Mode string `json:"mode"`
	// Resource is the rule's resource pattern; Scope what it counts per:
	// "key", "tenant" or "ip" (the caller's address as the server sees it).
	Resource     string `json:"resource"`
	Scope        string `json:"scope"`
	Limit        int64  `json:"limit"`
	WindowS      int64  `json:"window_s"`
	Remaining    int64  `json:"remaining"`
	ResetAfterMS int64  `json:"reset_after_ms"`
}

// QuotaStanding is the calendar month's units against the plan's
// included units. Mode "shadow" is an overage quota: units beyond it are
// billed, and Used stops at IncludedUnits.
type QuotaStanding struct {
	Mode          string `json:"mode"`
	IncludedUnits int64  `json:"included_units"`
	Used          int64  `json:"used"`
	Remaining     int64  `json:"remaining"`
	ResetAfterMS  int64  `json:"reset_after_ms"`
}

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
	if _, err := roundTrip(ctx, c.http, c.timeout, http.MethodGet, c.baseURL+"/v1/me", apiKey, nil, &st, maxDecisionBody); err != nil {
		return nil, fmt.Errorf("tollgate: me: %w", err)
	}
	return &st, nil
}
