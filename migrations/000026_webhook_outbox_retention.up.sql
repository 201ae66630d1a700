-- Schema v26: webhook deliveries claimed endpoint by endpoint, failing
-- endpoints judged by their latest failure, and the outbox's retention.
--
-- A deliverer claims each enabled endpoint's oldest due delivery through
-- (endpoint_id, next_attempt_at), so that a disabled endpoint's backlog,
-- or that of one whose slots are full, is never walked.
CREATE INDEX webhook_deliveries_endpoint_due ON webhook_deliveries (endpoint_id, next_attempt_at, id)
    WHERE state = 'pending';

-- The retention deletes finished deliveries (their attempts with them)
-- oldest first.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (finished_at) WHERE state <> 'pending';

-- last_failed_at is the endpoint's latest failed attempt: an endpoint is
-- failing (since failing_since) only while its failed attempts follow one
-- another within a day, so that one failure after a quiet month does not
-- count the month as failing.
ALTER TABLE webhook_endpoints ADD COLUMN last_failed_at timestamptz;
UPDATE webhook_endpoints w SET last_failed_at = coalesce((SELECT max(a.at) FROM webhook_deliveries d
        JOIN webhook_attempts a ON a.delivery_id = d.id
        WHERE d.endpoint_id = w.id AND a.at >= w.failing_since AND (a.status IS NULL OR a.status NOT BETWEEN 200 AND 299)),
    w.failing_since)
    WHERE w.failing_since IS NOT NULL;

-- Nothing but the retention deletes events, and it must never take a
-- delivery with one: a replay's delivery committed while the retention
-- judged its event unused makes the event's delete fail (and the
-- retention tries again later), where a cascade took the new delivery
-- with it.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_id_fkey,
    ADD CONSTRAINT webhook_deliveries_event_id_fkey FOREIGN KEY (event_id) REFERENCES events(id);
