package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/limiter"
)

// The scripts of a balance's counter and consumption log (check.lua
// writes both; see limiter.Credits). Each is one call on keys of one slot.
var (
	creditsReadScript = redis.NewScript(`local t = redis.call('TIME')
local c = redis.call('GET', KEYS[1])
local e = redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
return {c, e, t[1] * 1000000 + t[2]}`)
	// The log's origin (CreditsOriginKey) is read, and made when missing
	// and the caller offers one, in the call that reads the log: the
	// entries read are of the Redis that origin names.
	creditsReadOriginScript = redis.NewScript(`local t = redis.call('TIME')
local o = redis.call('GET', KEYS[3])
if not o and ARGV[3] ~= '' then
  redis.call('SET', KEYS[3], ARGV[3])
  o = ARGV[3]
end
local c = redis.call('GET', KEYS[1])
local e = redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+', 'COUNT', ARGV[2])
return {c, e, t[1] * 1000000 + t[2], o}`)
	creditsTrimScript = redis.NewScript(`return redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])`)
	// The identity an earlier release kept for the whole Redis.
	creditsLegacyOriginScript = redis.NewScript(`return redis.call('GET', KEYS[1]) or ''`)
	// A log is trimmed only while its origin is the one its entries were
	// recorded under: a log made since (Redis back empty) is not read yet.
	creditsTrimOriginScript = redis.NewScript(`if redis.call('GET', KEYS[2]) ~= ARGV[2] then return 0 end
return redis.call('XTRIM', KEYS[1], 'MINID', ARGV[1])`)
	creditsAdjustScript = redis.NewScript(`if redis.call('EXISTS', KEYS[1]) == 1 then
  return redis.call('INCRBY', KEYS[1], ARGV[1])
end
return 0`)
	// A region's escrow is what its counter leaves below zero: taken back
	// only from there, atomically with the checks drawing on it.
	creditsReclaimScript = redis.NewScript(`local c = tonumber(redis.call('GET', KEYS[1]))
local want = tonumber(ARGV[1])
if not c or c >= 0 or want <= 0 then return 0 end
if want > -c then want = -c end
redis.call('INCRBY', KEYS[1], want)
return want`)
	// The counter is made only when missing and when the log holds
	// nothing after what the caller recorded: a draw logged since (a
	// deferred one, or a settlement's) is recorded first, next time.
	creditsRebuildScript = redis.NewScript(`if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if #redis.call('XRANGE', KEYS[2], '(' .. ARGV[1], '+', 'COUNT', 1) > 0 then return 0 end
redis.call('SET', KEYS[1], ARGV[2])
return 1`)
)

// ReadCredits returns the counter at key and up to max entries of the
// consumption log at log after the entry after, with Redis's clock, read
// in one script call.
func (s *Store) ReadCredits(ctx context.Context, key, log, after string, max int) (limiter.CreditRead, error) {
	var r limiter.CreditRead
	if after == "" {
		after = "0-0"
	}
	reply, err := creditsReadScript.Run(ctx, s.client, []string{key, log}, after, max).Slice()
	if err != nil {
		return r, fmt.Errorf("redisstore: read credits: %w", err)
	}
	return creditRead(reply, 3)
}

// ReadCreditsOrigin is ReadCredits that also returns the log's origin,
// read in the same script call: the identity at CreditsOriginKey(log),
// first set to id when it is missing and id is not empty ("" when it is
// missing and id is). A Redis that comes back empty has lost it with the
// log, so an origin read once names every entry read with it, and one
// read before names another Redis's log when they differ. The caller
// offers a new random id: an origin is never one of a Redis before.
func (s *Store) ReadCreditsOrigin(ctx context.Context, key, log, after string, max int, id string) (limiter.CreditRead, string, error) {
	if after == "" {
		after = "0-0"
	}
	reply, err := creditsReadOriginScript.Run(ctx, s.client, []string{key, log, CreditsOriginKey(log)}, after, max, id).Slice()
	if err != nil {
		return limiter.CreditRead{}, "", fmt.Errorf("redisstore: read credits: %w", err)
	}
	r, err := creditRead(reply, 4)
	if err != nil {
		return r, "", err
	}
	origin, _ := reply[3].(string)
	return r, origin, nil
}

// CreditsOriginKey returns the key of the origin of the consumption log
// at log: beside it, in its slot.
func CreditsOriginKey(log string) string { return log + ":origin" }

// creditRead reads the reply of a credits read script, of n values.
func creditRead(reply []any, n int) (limiter.CreditRead, error) {
	var r limiter.CreditRead
	var err error
	if len(reply) != n {
		return r, fmt.Errorf("redisstore: read credits: reply of %d values", len(reply))
	}
	if c, ok := reply[0].(string); ok {
		if r.Consumed, err = strconv.ParseInt(c, 10, 64); err != nil {
			return r, fmt.Errorf("redisstore: read credits: counter %q", c)
		}
		r.Present = true
	}
	r.NowUS, _ = reply[2].(int64)
	raw, _ := reply[1].([]any)
	for _, x := range raw {
		e, err := creditEntry(x)
		if err != nil {
			return r, err
		}
		r.Entries = append(r.Entries, e)
	}
	return r, nil
}

// creditEntry reads one XRANGE entry: its ID and its fields (u, o, n, d,
// t, a, v, h; settle.lua and check.lua say what each holds).
func creditEntry(r any) (limiter.CreditEntry, error) {
	pair, _ := r.([]any)
	if len(pair) != 2 {
		return limiter.CreditEntry{}, fmt.Errorf("redisstore: read credits: bad entry %v", r)
	}
	var e limiter.CreditEntry
	e.ID, _ = pair[0].(string)
	fields, _ := pair[1].([]any)
	for i := 0; i+1 < len(fields); i += 2 {
		name, _ := fields[i].(string)
		value, _ := fields[i+1].(string)
		var err error
		switch name {
		case "u":
			e.Units, err = strconv.ParseInt(value, 10, 64)
		case "o":
			e.Overage, err = strconv.ParseInt(value, 10, 64)
		case "n":
			e.Unpaid, err = strconv.ParseInt(value, 10, 64)
		case "d":
			var d int
			d, err = strconv.Atoi(value)
			e.Deferred = limiter.Deferred(d)
		case "t":
			e.AtUS, err = strconv.ParseInt(value, 10, 64)
		case "a":
			e.OpenedUS, err = strconv.ParseInt(value, 10, 64)
		case "v":
			e.HoldOverage, err = strconv.ParseInt(value, 10, 64)
		case "h":
			e.HoldID = value
		}
		if err != nil {
			return limiter.CreditEntry{}, fmt.Errorf("redisstore: read credits: entry %s field %s: %w", e.ID, name, err)
		}
	}
	return e, nil
}

// TrimCredits drops the log's entries up to and including through.
func (s *Store) TrimCredits(ctx context.Context, log, through string) error {
	ms, seq := splitID(through)
	next := strconv.FormatInt(ms, 10) + "-" + strconv.FormatUint(seq+1, 10)
	if err := creditsTrimScript.Run(ctx, s.client, []string{log}, next).Err(); err != nil {
		return fmt.Errorf("redisstore: trim credits: %w", err)
	}
	return nil
}

// LegacyCreditsOrigin returns the identity an earlier release kept for
// the whole Redis, at prefix + "{credits}:origin", before each log kept
// its own ("" when there is none): the drainer takes a log with no
// identity yet for that Redis's when the account names it.
func (s *Store) LegacyCreditsOrigin(ctx context.Context, prefix string) (string, error) {
	v, err := creditsLegacyOriginScript.Run(ctx, s.client, []string{prefix + "{credits}:origin"}).Text()
	if err != nil {
		return "", fmt.Errorf("redisstore: legacy credits origin: %w", err)
	}
	return v, nil
}

// TrimCreditsOrigin is TrimCredits while the log's origin is origin (as
// ReadCreditsOrigin returned it), in one script call: otherwise Redis
// came back empty since, and it trims nothing of a log not yet read.
func (s *Store) TrimCreditsOrigin(ctx context.Context, log, through, origin string) error {
	ms, seq := splitID(through)
	next := strconv.FormatInt(ms, 10) + "-" + strconv.FormatUint(seq+1, 10)
	if err := creditsTrimOriginScript.Run(ctx, s.client, []string{log, CreditsOriginKey(log)}, next, origin).Err(); err != nil {
		return fmt.Errorf("redisstore: trim credits: %w", err)
	}
	return nil
}

func splitID(id string) (ms int64, seq uint64) {
	for i := 0; i < len(id); i++ {
		if id[i] == '-' {
			ms, _ = strconv.ParseInt(id[:i], 10, 64)
			seq, _ = strconv.ParseUint(id[i+1:], 10, 64)
			break
		}
	}
	return ms, seq
}

// AdjustCredits adds delta to the counter at key when it exists.
func (s *Store) AdjustCredits(ctx context.Context, key string, delta int64) error {
	if err := creditsAdjustScript.Run(ctx, s.client, []string{key}, delta).Err(); err != nil {
		return fmt.Errorf("redisstore: adjust credits: %w", err)
	}
	return nil
}

// ReclaimCredits takes back up to want units of what the counter at key
// leaves below zero, in one script call, and returns the units taken.
func (s *Store) ReclaimCredits(ctx context.Context, key string, want int64) (int64, error) {
	taken, err := creditsReclaimScript.Run(ctx, s.client, []string{key}, want).Int64()
	if err != nil {
		return 0, fmt.Errorf("redisstore: reclaim credits: %w", err)
	}
	return taken, nil
}

// RebuildCredits sets the missing counter at key to consumed when the log
// at log holds no entry after the entry after, in one script call; made
// is false when it did not.
func (s *Store) RebuildCredits(ctx context.Context, key, log, after string, consumed int64) (bool, error) {
	if after == "" {
		after = "0-0"
	}
	made, err := creditsRebuildScript.Run(ctx, s.client, []string{key, log}, after, consumed).Int()
	if err != nil {
		return false, fmt.Errorf("redisstore: rebuild credits: %w", err)
	}
	return made == 1, nil
}
