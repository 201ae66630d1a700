package metering

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Stream entry fields: what a RedisProducer writes and a consumer reads.
const (
	StreamFieldID    = "id"
	StreamFieldBatch = "batch"
)

// RedisProducer publishes batches with XADD to a Redis Stream: one entry
// per batch, fields "id" (the batch ID) and "batch" (its JSON).
type RedisProducer struct {
	client redis.UniversalClient
	stream string
}

// NewRedisProducer returns a producer appending to stream.
func NewRedisProducer(client redis.UniversalClient, stream string) *RedisProducer {
	return &RedisProducer{client: client, stream: stream}
}

// Publish appends b to the stream (one round trip).
func (p *RedisProducer) Publish(ctx context.Context, b Batch) error {
	data, err := b.Encode()
	if err != nil {
		return fmt.Errorf("usage: encode batch: %w", err)
	}
	err = p.client.XAdd(ctx, &redis.XAddArgs{Stream: p.stream, Values: []any{StreamFieldID, b.ID, StreamFieldBatch, data}}).Err()
	if err != nil {
		return fmt.Errorf("usage: xadd %s: %w", p.stream, err)
	}
	return nil
}
