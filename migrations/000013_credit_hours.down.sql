CREATE TABLE credit_overage (
    tenant_id  uuid NOT NULL REFERENCES tenants(id),
    month      date NOT NULL,
    units      bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, month)
);
INSERT INTO credit_overage (tenant_id, month, units)
    SELECT tenant_id, date_trunc('month', hour AT TIME ZONE 'UTC')::date, sum(overage) FROM credit_hours
    GROUP BY 1, 2 HAVING sum(overage) <> 0;
DROP TABLE credit_hours;
