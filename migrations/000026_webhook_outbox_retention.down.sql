-- Binaries of schema 25 judge a failing endpoint by failing_since alone
-- and claim deliveries through webhook_deliveries_due.
ALTER TABLE webhook_deliveries DROP CONSTRAINT webhook_deliveries_event_id_fkey,
    ADD CONSTRAINT webhook_deliveries_event_id_fkey FOREIGN KEY (event_id) REFERENCES events(id) ON DELETE CASCADE;
ALTER TABLE webhook_endpoints DROP COLUMN last_failed_at;
DROP INDEX webhook_deliveries_finished;
DROP INDEX webhook_deliveries_endpoint_due;
