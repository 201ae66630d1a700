package events

import (
	"context"
	"fmt"
	"time"
)

// Health is how an endpoint's deliveries are going, for the console's
// list of endpoints.
type Health struct {
	// Last is the latest attempt among its latest healthWindow deliveries
	// that were attempted; nil when none was.
	Last *Attempt
	// Pending is how many of its deliveries await an attempt.
	Pending int
}

// healthWindow bounds the deliveries Health looks through for the latest
// attempt, so that an endpoint with years of deliveries costs the same.
const healthWindow = 100

// Health returns the health of the endpoints ids (operators' scope: the
// caller has listed them), by endpoint ID.
func (s *Store) Health(ctx context.Context, ids []string) (map[string]Health, error) {
	out := make(map[string]Health, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	// The pending deliveries are counted in one pass over them (the due
	// index holds only those). The latest attempts are looked for in each
	// endpoint's latest deliveries through (endpoint_id, id DESC): the
	// range on endpoint_id, not an equality, keeps the planner from
	// walking every delivery backwards by ID instead, as it does when the
	// statistics say one endpoint has nearly all of them.
	rows, err := s.db.Query(ctx, `WITH pending AS (SELECT endpoint_id, count(*) AS n FROM webhook_deliveries
			WHERE state = 'pending' AND endpoint_id = ANY($1::uuid[]) GROUP BY endpoint_id)
		SELECT w.id::text, coalesce(p.n, 0), a.attempt, a.at, a.status, a.latency_us, a.error
		FROM unnest($1::uuid[]) AS w(id)
		LEFT JOIN pending p ON p.endpoint_id = w.id
		LEFT JOIN LATERAL (SELECT a.attempt, a.at, a.status, a.latency_us, a.error
			FROM (SELECT d.id FROM webhook_deliveries d
				WHERE d.endpoint_id >= w.id AND d.endpoint_id <= w.id AND d.attempts > 0
				ORDER BY d.endpoint_id, d.id DESC LIMIT $2) d
			JOIN webhook_attempts a ON a.delivery_id = d.id ORDER BY a.at DESC, a.id DESC LIMIT 1) a ON true`, ids, healthWindow)
	if err != nil {
		return nil, fmt.Errorf("events: endpoint health: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var h Health
		var n *int
		var at *time.Time
		var a Attempt
		var latency *int64
		var errText *string
		if err := rows.Scan(&id, &h.Pending, &n, &at, &a.Status, &latency, &errText); err != nil {
			return nil, fmt.Errorf("events: endpoint health: %w", err)
		}
		if n != nil {
			a.N, a.At, a.LatencyUS, a.Error = *n, *at, *latency, *errText
			h.Last = &a
		}
		out[id] = h
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("events: endpoint health: %w", err)
	}
	return out, nil
}
