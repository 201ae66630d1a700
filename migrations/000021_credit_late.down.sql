DROP INDEX credit_ledger_hold;
ALTER TABLE credit_accounts DROP COLUMN drained_through;
DROP TABLE credit_late;
