DROP TABLE plan_billing;
