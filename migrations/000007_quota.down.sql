DROP TABLE quota_crossings;
DROP TABLE quota_tenant_settings;
DROP TABLE quota_plan_settings;
