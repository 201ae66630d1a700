package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/enforce/limiter"
)

// loginLimiter protects the login endpoint with Tollgate's own limiter:
// GCRA, perMinute attempts a minute (all at once at most) per client IP
// and, separately, per email — so that neither one address trying many
// accounts nor many addresses trying one account get far. Both are decided
// in one all-or-nothing batch: an attempt refused by one limit does not
// use up the other. Every attempt counts, successful or not.
type loginLimiter struct {
	store     limiter.Store
	prefix    string
	perMinute int64
	log       *slog.Logger
}

// allow decides an attempt from ip for email. When it is refused, retry is
// how long until the same attempt could pass. If the limiter store cannot
// be reached the attempt is allowed (failing open keeps operators able to
// log in while Redis is down; the password hash's cost still slows
// guessing) and a warning is logged.
func (l *loginLimiter) allow(ctx context.Context, ip, email string) (ok bool, retry time.Duration) {
	params := limiter.Params{Algorithm: limiter.GCRA, Limit: l.perMinute, PeriodUS: limiter.Minute, Burst: l.perMinute}
	// One hash tag for both keys: the batch runs in one script call on
	// Redis Cluster. Emails are hashed so that none sits in Redis in clear.
	sum := sha256.Sum256([]byte(email))
	tag := l.prefix + "{admin-login}:"
	out, err := l.store.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{
		{Key: tag + "ip:" + ip, Params: params},
		{Key: tag + "email:" + hex.EncodeToString(sum[:16]), Params: params},
	}})
	if err != nil {
		l.log.WarnContext(ctx, "login limiter unavailable; allowing the attempt", "err", err)
		return true, 0
	}
	if out.Admitted {
		return true, 0
	}
	var us int64
	for _, r := range out.Results {
		if !r.Allowed && r.RetryAfterUS > us {
			us = r.RetryAfterUS
		}
	}
	return false, time.Duration(us) * time.Microsecond
}
