-- Schema v22: idempotency keys of grants and adjustments.
--
-- A grant or adjustment made with an idempotency key (the API's
-- Idempotency-Key header, the CLI's --idempotency-key, the console's
-- form) is made once per tenant and key: the first request claims the
-- key by inserting its row, in the transaction of the change, so a
-- second request with the key waits on the primary key until the first
-- commits (or rolls back, leaving the key unclaimed) and then answers
-- what the first made. request_hash is the SHA-256 of the request
-- (action and values), so a key sent again with another request is
-- refused; result is the answer, written in the same transaction as the
-- claim (never NULL once committed). Keys are kept for good, like the
-- ledger they guard: a retry however late still changes nothing.
CREATE TABLE credit_idempotency_keys (
    tenant_id     uuid NOT NULL REFERENCES tenants(id),
    key           text NOT NULL CHECK (length(key) BETWEEN 1 AND 200),
    action        text NOT NULL CHECK (action IN ('credits.grant', 'credits.adjust')),
    request_hash  bytea NOT NULL,
    result        jsonb,
    created_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, key)
);
