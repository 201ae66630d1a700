package adminapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"time"

	"github.com/tollgate/tollgate/internal/breaker"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
)

// Login limits, as multiples of TOLLGATE_ADMIN_LOGIN_LIMIT (perMinute).
const (
	// networkFactor: attempts a minute from one client network, whatever
	// the email. Looser than the per-(network, email) limit so that
	// several people behind one NAT can still log in.
	networkFactor = 4
	// emailFailureFactor: failed attempts a minute on one email, from
	// anywhere.
	emailFailureFactor = 5
)

// loginLimiter protects the login endpoint with Tollgate's own limiter
// (GCRA, each limit a minute's worth at once at most). Every attempt
// counts against its client network (an IPv4 address or an IPv6 /64:
// see clientNetwork), networkFactor × perMinute a minute: that bounds the
// password checks one network can ask for, right or wrong, also when it
// sends them all at once. Failed attempts alone count against the
// (network, email) pair, perMinute a minute, and against the email
// itself, emailFailureFactor × perMinute a minute from all networks
// together; once the email's budget is spent, only networks that failed
// on it in the last failureMemory are refused. So guessing one password
// from many addresses is bounded, a user who types the right password
// from an address that has not failed always gets in (nobody can lock a
// user out), and signing in successfully, however often, never refuses
// the account's next sign-in. An attempt refused by one limit uses up
// none of the others. Safe for concurrent use.
type loginLimiter struct {
	store     limiter.Store
	prefix    string
	perMinute int64
	log       *slog.Logger
}

func (l *loginLimiter) params(factor int64) limiter.Params {
	n := factor * l.perMinute
	return limiter.Params{Algorithm: limiter.GCRA, Limit: n, PeriodUS: limiter.MinuteUS, Burst: n}
}

// hashed returns parts hashed (separated by a zero byte), so that no email
// sits in Redis in clear.
func hashed(parts ...string) string {
	h := sha256.New()
	for i, p := range parts {
		if i > 0 {
			h.Write([]byte{0})
		}
		h.Write([]byte(p))
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// Keys: one hash tag for all of them, so that each batch runs in one
// script call on Redis Cluster.
func (l *loginLimiter) networkKey(network string) string {
	return l.prefix + "{admin-login}:net:" + network
}

// networkEmailKey meters a network's failures on an email.
func (l *loginLimiter) networkEmailKey(network, email string) string {
	return l.prefix + "{admin-login}:net-email:" + hashed(network, email)
}

func (l *loginLimiter) emailFailuresKey(email string) string {
	return l.prefix + "{admin-login}:email-failures:" + hashed(email)
}

func (l *loginLimiter) networkEmailFailedKey(network, email string) string {
	return l.prefix + "{admin-login}:net-email-failed:" + hashed(network, email)
}

// failureMemory is how long a network that failed on an email counts as
// having failed on it (each failure adds as much, up to a day).
const failureMemory = 15 * time.Minute

// failedParams meter a network's failures on an email: the state stays
// until failureMemory after the last one, which ResetAfterUS tells.
var failedParams = limiter.Params{Algorithm: limiter.GCRA, Limit: 1, PeriodUS: int64(failureMemory / time.Microsecond), Burst: 96}

// allow decides an attempt from ip for email (normalized), before the
// password is checked, and counts it against the network's limit. When it
// is refused, retry is how long until the same attempt could pass. If the
// limiter store cannot be reached the attempt is allowed (failing open
// keeps operators able to log in while Redis is down; the password hash's
// cost still slows guessing) and a warning is logged.
func (l *loginLimiter) allow(ctx context.Context, ip, email string) (ok bool, retry time.Duration) {
	network := clientNetwork(ip)
	// Failure budgets are looked at only (dry runs): failed adds to them
	// once the password turned out wrong. The pair's spent budget refuses
	// the attempt; the email's refuses only a network that has failed on
	// it.
	out, err := l.store.Check(ctx, limiter.Batch{Cost: 1, DryRun: true, Requests: []limiter.Request{
		{Key: l.networkEmailKey(network, email), Params: l.params(1)},
		{Key: l.emailFailuresKey(email), Params: l.params(emailFailureFactor)},
	}})
	if err != nil {
		l.unavailable(ctx, "login limiter unavailable; allowing the attempt", err)
		return true, 0
	}
	if pairBudget := out.Results[0]; !pairBudget.Allowed {
		return false, retryAfter(limiter.Outcome{Results: []limiter.Result{pairBudget}})
	}
	if emailBudget := out.Results[1]; !emailBudget.Allowed {
		failed, err := l.store.Check(ctx, limiter.Batch{Cost: 0, DryRun: true, Requests: []limiter.Request{
			{Key: l.networkEmailFailedKey(network, email), Params: failedParams},
		}})
		if err != nil || failed.Results[0].ResetAfterUS > 0 {
			return false, retryAfter(limiter.Outcome{Results: []limiter.Result{emailBudget}})
		}
	}
	out, err = l.store.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{
		{Key: l.networkKey(network), Params: l.params(networkFactor)},
	}})
	if err != nil {
		l.unavailable(ctx, "login limiter unavailable; allowing the attempt", err)
		return true, 0
	}
	if !out.Admitted {
		return false, retryAfter(out)
	}
	return true, 0
}

// failed counts a failed attempt (wrong email or password) from ip against
// the (network, email) pair and email, and remembers that ip's network
// failed on it.
func (l *loginLimiter) failed(ctx context.Context, ip, email string) {
	network := clientNetwork(ip)
	for _, r := range []limiter.Request{
		{Key: l.networkEmailKey(network, email), Params: l.params(1)},
		{Key: l.emailFailuresKey(email), Params: l.params(emailFailureFactor)},
		{Key: l.networkEmailFailedKey(network, email), Params: failedParams},
	} {
		// Separately: a spent budget must not stop the other from counting.
		if _, err := l.store.Check(ctx, limiter.Batch{Cost: 1, Requests: []limiter.Request{r}}); err != nil {
			l.unavailable(ctx, "login limiter unavailable; a failed login was not counted", err)
			return
		}
	}
}

// unavailable logs a store error, unless it is the circuit breaker's: an
// open circuit was logged once when it opened.
func (l *loginLimiter) unavailable(ctx context.Context, msg string, err error) {
	if !errors.Is(err, breaker.ErrOpen) {
		l.log.WarnContext(ctx, msg, "err", err)
	}
}

// LoginProbe is the dry run a circuit breaker around the login limiter's
// store sends to learn whether the store is back: it changes nothing.
func LoginProbe(prefix string) limiter.Batch {
	return limiter.Batch{DryRun: true, Cost: 1, Requests: []limiter.Request{
		{Key: prefix + "{admin-login}:probe", Params: limiter.Params{Algorithm: limiter.GCRA, Limit: 1, PeriodUS: limiter.SecondUS}},
	}}
}

// retryAfter is the longest wait any refusing rule of out asks for.
func retryAfter(out limiter.Outcome) time.Duration {
	var us int64
	for _, r := range out.Results {
		if !r.Allowed && r.RetryAfterUS > us {
			us = r.RetryAfterUS
		}
	}
	return time.Duration(us) * time.Microsecond
}

// clientNetwork is what the per-client login limits count by: an IPv4
// address (IPv4-mapped IPv6 included) as it is, an IPv6 address by its
// /64 — one subscriber usually has a whole /64 and could otherwise step
// through its addresses to escape the limits. Anything else (not an IP)
// is used as it is.
func clientNetwork(ip string) string { return enforce.Network(ip, 64) }
