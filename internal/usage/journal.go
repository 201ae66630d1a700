package usage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/metering"
	"github.com/tollgate/tollgate/internal/statekey"
)

// JournalConsumer delivers the usage the limiter store journaled when it
// decided the checks (statekey.go lays the journals out): every Interval
// it claims each hash tag's journal and hands it on as one batch. A claim
// moves the journal aside (one script call per tag, the tags pipelined)
// and names it with the tag, 128 random bits drawn for the claim and a
// sequence kept beside it, the name stored with the claim; until it is
// acknowledged, every claim of that tag returns the same batch under the
// same name again, so a worker that died before its Ack (or whose apply
// failed) leaves nothing behind, and the batch ID makes applying it
// exactly once (Store.ApplyAll). The randomness makes a name unique for
// all time whatever Redis forgets: a Redis that comes back empty, restored
// from an older snapshot, that lost its last second in a crash or failed
// over to a replica that lagged, rewinds the sequence, and a name made of
// it alone would repeat one already applied, dropping the new claim's
// usage as a duplicate. A claim that comes back with such a rewind keeps
// the name it was stored with, and so is known as applied if it was.
//
// Several workers may claim at once: they get the same batches, which
// apply once, and the first Ack removes each.
//
// A claimed journal is handed on only from the claim after the one that
// first saw it, at least holdBack later (the interval, and at least
// 200 ms): what the api process publishes right after a check (a quota
// crossing, flushed at once) then reaches the worker before the check's
// units do, so that the units never show a threshold crossed that no
// check has reported yet.
type JournalConsumer struct {
	client   redis.UniversalClient
	prefix   string
	interval time.Duration
	holdBack time.Duration
	now      func() time.Time

	mu   sync.Mutex
	next time.Time
	// seen is when each claim (by ID) was first read.
	seen map[string]time.Time
}

// NewJournalConsumer returns a consumer of the usage journals under prefix
// (the limiter state keys' prefix), claiming them every interval (default
// 1s).
func NewJournalConsumer(client redis.UniversalClient, prefix string, interval time.Duration) *JournalConsumer {
	if interval <= 0 {
		interval = time.Second
	}
	return &JournalConsumer{client: client, prefix: prefix, interval: interval, holdBack: max(interval, 200*time.Millisecond),
		now: time.Now, seen: map[string]time.Time{}}
}

// journalIDPrefix starts the message (and batch) IDs of journals, apart
// from the stream's entry IDs.
const journalIDPrefix = "journal:"

// claimScript claims a tag's journal: KEYS the journal, the claimed
// journal and the sequence hash (statekey.JournalKey, ClaimedJournalKey,
// JournalSeqKey: s the sequence, c the current claim's name); ARGV[1]
// fresh random bits (hex), which name a new claim with the sequence. It
// returns the claim's name and the claimed journal, or nothing when there
// is none. A claimed journal whose name was lost (the hash deleted) gets
// a new one. A claim made before this release keeps the name it has (of
// an epoch, the hash's e, no longer written, and the sequence).
var claimScript = redis.NewScript(`
local claimed = redis.call('EXISTS', KEYS[2]) == 1
if not claimed then
  if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
  redis.call('RENAME', KEYS[1], KEYS[2])
end
local name = redis.call('HGET', KEYS[3], 'c')
if not claimed or not name then
  name = ARGV[1] .. ':' .. redis.call('HINCRBY', KEYS[3], 's', 1)
  redis.call('HSET', KEYS[3], 'c', name)
end
return {name, redis.call('GET', KEYS[2])}`)

// ackScript drops KEYS[1], a claimed journal, if it is still the claim
// named ARGV[1] (KEYS[2], the sequence hash, names the current one).
var ackScript = redis.NewScript(`
if redis.call('HGET', KEYS[2], 'c') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// Fetch implements Consumer: at most once per interval (else nothing),
// the claimed journals of up to count tags.
func (j *JournalConsumer) Fetch(ctx context.Context, count int) ([]Message, error) {
	j.mu.Lock()
	now := j.now()
	if now.Before(j.next) {
		j.mu.Unlock()
		return nil, nil
	}
	j.mu.Unlock()
	// The name of any claim this fetch makes (with its tag and sequence):
	// unique for all time, so a Redis that rewinds cannot repeat it.
	fresh := make([]byte, 16)
	_, _ = rand.Read(fresh) // never fails (crypto/rand)
	nonce := hex.EncodeToString(fresh)
	tags := statekey.Tags()
	cmds := make([]*redis.Cmd, len(tags))
	run := func(tags []byte, cmds []*redis.Cmd, load bool) error {
		_, err := j.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, tag := range tags {
				keys := []string{statekey.JournalKey(j.prefix, tag), statekey.ClaimedJournalKey(j.prefix, tag), statekey.JournalSeqKey(j.prefix, tag)}
				if load {
					cmds[i] = claimScript.Eval(ctx, p, keys, nonce)
				} else {
					cmds[i] = claimScript.EvalSha(ctx, p, keys, nonce)
				}
			}
			return nil
		})
		return err
	}
	err := run(tags, cmds, false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		// A server without the script (new, or restarted): once with it.
		err = run(tags, cmds, true)
	}
	if err != nil {
		return nil, fmt.Errorf("usage: claim journals: %w", err)
	}
	var out []Message
	j.mu.Lock()
	defer j.mu.Unlock()
	claims := make(map[string]time.Time, len(j.seen))
	for i, cmd := range cmds {
		flat, err := cmd.StringSlice()
		if err != nil {
			return nil, fmt.Errorf("usage: claim journal: %w", err)
		}
		if len(flat) == 0 {
			continue
		}
		m := j.message(tags[i], flat[0], flat[1])
		first, ok := j.seen[m.ID]
		if !ok {
			first = now
		}
		claims[m.ID] = first
		if now.Sub(first) < j.holdBack || len(out) == count {
			continue // the next fetch hands it on
		}
		out = append(out, m)
	}
	j.seen = claims
	if len(out) < count {
		j.next = now.Add(j.interval)
	}
	return out, nil
}

// message returns the journal raw of tag, claimed under claim, as a
// message; one that cannot be read is set aside as it is, and entries
// that cannot be applied are set aside alone (metering.SplitJournal). Its
// payload is the claimed journal, as a stream entry's is its batch, so
// that a claim set aside whole — unreadable, or its data refused by
// Postgres — keeps what it held.
func (j *JournalConsumer) message(tag byte, claim, raw string) Message {
	m := Message{ID: journalIDPrefix + hex.EncodeToString([]byte{tag}) + ":" + claim, Payload: raw}
	m.Batch, m.Refused, m.Err = metering.SplitJournal(m.ID, j.now().UnixMicro(), raw)
	return m
}

// Ack implements Consumer: each claimed journal named is dropped, if it
// is still that claim.
func (j *JournalConsumer) Ack(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	type ack struct{ key, seq, claim string }
	acks := make([]ack, 0, len(ids))
	for _, id := range ids {
		rest, ok := strings.CutPrefix(id, journalIDPrefix)
		tagHex, claim, ok2 := strings.Cut(rest, ":")
		tag, err := hex.DecodeString(tagHex)
		if !ok || !ok2 || err != nil || len(tag) != 1 {
			return fmt.Errorf("usage: ack journal: %q is not a journal's ID", id)
		}
		acks = append(acks, ack{statekey.ClaimedJournalKey(j.prefix, tag[0]), statekey.JournalSeqKey(j.prefix, tag[0]), claim})
	}
	run := func(load bool) error {
		_, err := j.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, a := range acks {
				if load {
					ackScript.Eval(ctx, p, []string{a.key, a.seq}, a.claim)
				} else {
					ackScript.EvalSha(ctx, p, []string{a.key, a.seq}, a.claim)
				}
			}
			return nil
		})
		return err
	}
	err := run(false)
	if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
		err = run(true)
	}
	if err != nil {
		return fmt.Errorf("usage: ack journals: %w", err)
	}
	return nil
}

// Consumers delivers the journals' usage and the stream's batches to one
// worker: the journals when they are due (JournalConsumer), otherwise the
// stream. Acks go to the consumer whose messages they name.
type Consumers struct {
	Journal *JournalConsumer
	Stream  Consumer
}

// Fetch implements Consumer.
func (c Consumers) Fetch(ctx context.Context, count int) ([]Message, error) {
	msgs, err := c.Journal.Fetch(ctx, count)
	if err != nil || len(msgs) > 0 {
		return msgs, err
	}
	return c.Stream.Fetch(ctx, count)
}

// Ack implements Consumer.
func (c Consumers) Ack(ctx context.Context, ids ...string) error {
	var journal, stream []string
	for _, id := range ids {
		if strings.HasPrefix(id, journalIDPrefix) {
			journal = append(journal, id)
		} else {
			stream = append(stream, id)
		}
	}
	return errors.Join(c.Journal.Ack(ctx, journal...), c.Stream.Ack(ctx, stream...))
}

// Lag implements the backlog metrics with the stream's (the journals are
// claimed every second whatever their size).
func (c Consumers) Lag(ctx context.Context) (Lag, error) {
	l, ok := c.Stream.(lagger)
	if !ok {
		return Lag{}, errors.New("usage: the stream's consumer tells no lag")
	}
	return l.Lag(ctx)
}

// Backlog returns how many hash tags have usage journaled and not yet
// applied and acknowledged (a journal, or a claimed one).
func (j *JournalConsumer) Backlog(ctx context.Context) (int, error) {
	tags := statekey.Tags()
	cmds := make([]*redis.IntCmd, len(tags))
	_, err := j.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, tag := range tags {
			cmds[i] = p.Exists(ctx, statekey.JournalKey(j.prefix, tag), statekey.ClaimedJournalKey(j.prefix, tag))
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("usage: journal backlog: %w", err)
	}
	n := 0
	for _, c := range cmds {
		if c.Val() > 0 {
			n++
		}
	}
	return n, nil
}
