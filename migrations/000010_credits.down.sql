DROP TABLE credit_overage;
DROP TABLE credit_ledger;
DROP FUNCTION credit_ledger_append_only();
DROP TABLE credit_grants;
DROP TABLE credit_accounts;
DROP TABLE credit_plan_settings;
