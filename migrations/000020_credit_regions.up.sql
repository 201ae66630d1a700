-- Schema v20: prepaid balances across regions (docs/regions.md, "Money").
--
-- In a deployment of several regions every region draws on a tenant's
-- balance from an escrow reserved to it in the ledger's transaction, so
-- the regions together never draw more than the balance and its
-- overdraft. One row per tenant and region that drew or holds escrow:
-- position is the last entry of the region's consumption log (a stream
-- in the region's Redis) recorded; counted the units its counter added
-- (its log's units, refunds less); escrow the units reserved to it
-- (grants of escrow less what it gave back), so the region may still
-- draw escrow − counted, and its counter in Redis stands at
-- counted − escrow. demand is what its last drain recorded, through_us
-- the store's clock of that drain's read; lapse_at is when its escrow
-- stops counting (the soonest expiry of the grants it was reserved
-- from), which the check path reads and so announces itself.
CREATE TABLE credit_regions (
    tenant_id   uuid NOT NULL REFERENCES tenants(id),
    region      text NOT NULL,
    position    text NOT NULL DEFAULT '0-0',
    counted     bigint NOT NULL DEFAULT 0,
    escrow      bigint NOT NULL DEFAULT 0 CHECK (escrow >= 0),
    demand      bigint NOT NULL DEFAULT 0 CHECK (demand >= 0),
    through_us  bigint NOT NULL DEFAULT 0,
    lapse_at    timestamptz,
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, region)
);

CREATE TRIGGER credit_regions_inserted AFTER INSERT ON credit_regions
    FOR EACH STATEMENT EXECUTE FUNCTION tollgate_notify_change();
CREATE TRIGGER credit_regions_lapse_changed AFTER UPDATE ON credit_regions
    FOR EACH ROW WHEN (OLD.lapse_at IS DISTINCT FROM NEW.lapse_at) EXECUTE FUNCTION tollgate_notify_change();
