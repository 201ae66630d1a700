DROP TABLE credit_idempotency_keys;
