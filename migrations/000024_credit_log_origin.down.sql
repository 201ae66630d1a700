ALTER TABLE credit_accounts DROP COLUMN log_origin;
