DROP TRIGGER webhook_deliveries_inserted ON webhook_deliveries;
DROP FUNCTION tollgate_notify_webhooks();
DROP TABLE webhook_attempts;
DROP TABLE webhook_deliveries;
DROP TABLE webhook_endpoints;
DROP TABLE events;
