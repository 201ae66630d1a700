DROP TABLE credit_topups;
DROP TABLE provider_events;
DROP TABLE invoices;
DROP TABLE billing_accounts;
