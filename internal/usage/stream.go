package usage

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tollgate/tollgate/internal/metering"
)

// Consumer delivers published batches to a worker, at least once: a
// message is delivered again until it is acknowledged, also to another
// worker when its consumer died. The worker makes that exactly-once by
// applying each batch ID once (Store.Apply).
//
// The Redis Stream implementation is RedisConsumer; docs/usage.md sketches
// a Kafka one (consumer group, offsets committed after the Postgres
// commit).
type Consumer interface {
	// Fetch returns up to count messages: first ones delivered before but
	// never acknowledged (by a dead consumer, or by this one before a
	// restart), then new ones, waiting a bounded time for new ones. An
	// empty result is not an error.
	Fetch(ctx context.Context, count int) ([]Message, error)
	// Ack marks messages done: they are not delivered again.
	Ack(ctx context.Context, ids ...string) error
}

// Message is one delivered batch.
type Message struct {
	// ID is the transport's ID (the stream entry ID), used to Ack.
	ID    string
	Batch metering.Batch
	// Payload is the message as delivered (a stream entry's batch, a
	// claimed journal): what is kept should it be set aside whole.
	Payload string
	// Err is set when the payload is not a valid batch: it can never be
	// applied, and is set aside (usage_bad_batches) and acknowledged.
	Err error
	// Refused, when its Parts are not 0, is what of a valid batch can
	// never be applied (a row validation refuses): Batch is the rest,
	// applied under the batch's ID, and the worker sets Refused aside
	// alone (metering.SplitBatch, metering.SplitJournal).
	Refused metering.Refused
}

// RedisConsumerConfig configures a RedisConsumer.
type RedisConsumerConfig struct {
	Stream string
	// Group is the consumer group (default "tollgate-usage"); every worker
	// of one deployment uses the same group.
	Group string
	// Consumer names this worker within the group (default: host name).
	// A worker restarted under the same name first takes back its own
	// unacknowledged entries.
	Consumer string
	// ClaimIdle is how long an entry stays unacknowledged before another
	// consumer takes it over with XAUTOCLAIM (default 30s).
	ClaimIdle time.Duration
	// Block is how long Fetch waits for new entries (default 2s).
	Block time.Duration
}

// RedisConsumer reads batches from a Redis Stream with a consumer group
// (XREADGROUP), taking over entries of dead consumers (XAUTOCLAIM).
// Acknowledged entries are deleted from the stream (XACK and XDEL in one
// MULTI), so the stream's length is exactly the backlog: the stream
// belongs to the usage workers' group alone. Not safe for concurrent use;
// give each worker its own.
type RedisConsumer struct {
	client     redis.UniversalClient
	cfg        RedisConsumerConfig
	groupReady bool
	ownDone    bool
}

// NewRedisConsumer returns a consumer; the group is created on first use.
func NewRedisConsumer(client redis.UniversalClient, cfg RedisConsumerConfig) *RedisConsumer {
	if cfg.Group == "" {
		cfg.Group = "tollgate-usage"
	}
	if cfg.Consumer == "" {
		cfg.Consumer = "worker"
	}
	if cfg.ClaimIdle <= 0 {
		cfg.ClaimIdle = 30 * time.Second
	}
	if cfg.Block <= 0 {
		cfg.Block = 2 * time.Second
	}
	return &RedisConsumer{client: client, cfg: cfg}
}

func (c *RedisConsumer) ensureGroup(ctx context.Context) error {
	if c.groupReady {
		return nil
	}
	// From "0": entries published before the first worker ever ran count.
	err := c.client.XGroupCreateMkStream(ctx, c.cfg.Stream, c.cfg.Group, "0").Err()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("usage: create consumer group: %w", err)
	}
	c.groupReady = true
	return nil
}

// Fetch implements Consumer.
func (c *RedisConsumer) Fetch(ctx context.Context, count int) ([]Message, error) {
	if err := c.ensureGroup(ctx); err != nil {
		return nil, err
	}
	if !c.ownDone {
		// Our own entries from before a restart.
		msgs, err := c.read(ctx, "0", count, -1)
		if err != nil {
			return nil, err
		}
		if len(msgs) > 0 {
			return msgs, nil
		}
		c.ownDone = true
	}
	claimed, _, err := c.client.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: c.cfg.Stream, Group: c.cfg.Group, Consumer: c.cfg.Consumer,
		MinIdle: c.cfg.ClaimIdle, Start: "0-0", Count: int64(count),
	}).Result()
	if err != nil {
		return nil, c.lost(fmt.Errorf("usage: xautoclaim: %w", err))
	}
	if len(claimed) > 0 {
		return c.messages(ctx, claimed)
	}
	return c.read(ctx, ">", count, c.cfg.Block)
}

func (c *RedisConsumer) read(ctx context.Context, from string, count int, block time.Duration) ([]Message, error) {
	res, err := c.client.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: c.cfg.Group, Consumer: c.cfg.Consumer, Streams: []string{c.cfg.Stream, from},
		Count: int64(count), Block: block,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, c.lost(fmt.Errorf("usage: xreadgroup: %w", err))
	}
	var out []Message
	for _, s := range res {
		msgs, err := c.messages(ctx, s.Messages)
		if err != nil {
			return nil, err
		}
		out = append(out, msgs...)
	}
	return out, nil
}

// lost forgets the group after an error that says it (or the stream) is
// gone, e.g. after a Redis restart without persistence.
func (c *RedisConsumer) lost(err error) error {
	if strings.Contains(err.Error(), "NOGROUP") {
		c.groupReady = false
	}
	return err
}

// messages decodes entries. Entries deleted while pending (they come back
// without fields) are acknowledged and skipped.
func (c *RedisConsumer) messages(ctx context.Context, entries []redis.XMessage) ([]Message, error) {
	out := make([]Message, 0, len(entries))
	var gone []string
	for _, e := range entries {
		if e.Values == nil {
			gone = append(gone, e.ID)
			continue
		}
		payload, _ := e.Values[metering.StreamFieldBatch].(string)
		m := Message{ID: e.ID, Payload: payload}
		m.Batch, m.Refused, m.Err = metering.SplitBatch([]byte(payload))
		out = append(out, m)
	}
	if len(gone) > 0 {
		if err := c.Ack(ctx, gone...); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Ack implements Consumer: XACK and XDEL in one transaction.
func (c *RedisConsumer) Ack(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return nil
	}
	_, err := c.client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.XAck(ctx, c.cfg.Stream, c.cfg.Group, ids...)
		p.XDel(ctx, c.cfg.Stream, ids...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("usage: ack: %w", err)
	}
	return nil
}

// Backlog returns the number of batches published and not yet applied
// and acknowledged (the stream's length, as acknowledged entries are
// deleted), and how many of those are delivered but unacknowledged.
func (c *RedisConsumer) Backlog(ctx context.Context) (entries, pending int64, err error) {
	if entries, err = c.client.XLen(ctx, c.cfg.Stream).Result(); err != nil {
		return 0, 0, fmt.Errorf("usage: xlen: %w", err)
	}
	p, err := c.client.XPending(ctx, c.cfg.Stream, c.cfg.Group).Result()
	if err != nil {
		if strings.Contains(err.Error(), "NOGROUP") {
			return entries, 0, nil
		}
		return 0, 0, fmt.Errorf("usage: xpending: %w", err)
	}
	return entries, p.Count, nil
}

// Lag is how far the worker is behind the API processes.
type Lag struct {
	// Batches published and not yet applied and acknowledged.
	Batches int64
	// OldestAge is how long the oldest of them has waited (0 when none).
	OldestAge time.Duration
}

// Lag reads the stream's backlog: acknowledged entries are deleted, so
// the first entry is the oldest batch not applied yet, and its ID holds
// the Redis time it was added, compared here with Redis's clock.
func (c *RedisConsumer) Lag(ctx context.Context) (Lag, error) {
	pipe := c.client.Pipeline()
	length := pipe.XLen(ctx, c.cfg.Stream)
	first := pipe.XRangeN(ctx, c.cfg.Stream, "-", "+", 1)
	now := pipe.Time(ctx)
	if _, err := pipe.Exec(ctx); err != nil {
		return Lag{}, fmt.Errorf("usage: lag: %w", err)
	}
	lag := Lag{Batches: length.Val()}
	if entries := first.Val(); len(entries) > 0 {
		ms, _, _ := strings.Cut(entries[0].ID, "-")
		if addedMS, err := strconv.ParseInt(ms, 10, 64); err == nil {
			lag.OldestAge = max(0, now.Val().Sub(time.UnixMilli(addedMS)))
		}
	}
	return lag, nil
}
