-- Schema v16: statements become invoices at a payment provider (Stripe).
--
-- billing_accounts links a tenant to the provider's customer. invoices is
-- our record of each closed statement's invoice: made in the month's close
-- transaction for every tenant with a billing account, then pushed to the
-- provider (push_state pending → pushed) with keys derived from ref, so
-- that a push repeated after a crash creates nothing twice. provider_events
-- holds the ID of every provider event applied, each applied once.
-- credit_topups are prepaid credits bought through the provider: granted
-- once, when the provider says the payment succeeded.

CREATE TABLE billing_accounts (
    tenant_id    uuid PRIMARY KEY REFERENCES tenants(id) ON DELETE CASCADE,
    provider     text NOT NULL DEFAULT 'stripe',
    customer_id  text NOT NULL UNIQUE CHECK (length(customer_id) BETWEEN 1 AND 255),
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE invoices (
    tenant_id            uuid NOT NULL,
    month                date NOT NULL,
    -- ref names the statement at the provider (metadata, idempotency keys).
    ref                  text NOT NULL UNIQUE,
    customer_id          text NOT NULL,
    currency             text NOT NULL,
    -- total_minor is the statement's total; lines what was sent, in order.
    total_minor          bigint NOT NULL,
    lines                jsonb NOT NULL,
    push_state           text NOT NULL DEFAULT 'pending' CHECK (push_state IN ('pending', 'pushed')),
    push_attempts        int NOT NULL DEFAULT 0,
    next_push_at         timestamptz NOT NULL DEFAULT now(),
    last_error           text NOT NULL DEFAULT '',
    pushed_at            timestamptz,
    provider_invoice_id  text UNIQUE,
    provider_status      text NOT NULL DEFAULT '',
    provider_total_minor bigint,
    provider_currency    text NOT NULL DEFAULT '',
    payment_status       text NOT NULL DEFAULT 'unpaid'
        CHECK (payment_status IN ('unpaid', 'paid', 'failed', 'void')),
    paid_at              timestamptz,
    payment_failed_at    timestamptz,
    -- dunning_suspended_at is set when dunning suspended the tenant for
    -- this invoice; a later payment resumes it.
    dunning_suspended_at timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, month),
    FOREIGN KEY (tenant_id, month) REFERENCES statements (tenant_id, month)
);
CREATE INDEX invoices_due ON invoices (next_push_at) WHERE push_state = 'pending';
CREATE INDEX invoices_dunning ON invoices (payment_failed_at) WHERE payment_status = 'failed';

CREATE TABLE provider_events (
    id          text PRIMARY KEY,
    type        text NOT NULL,
    applied_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE credit_topups (
    id                   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    tenant_id            uuid NOT NULL REFERENCES tenants(id) ON DELETE CASCADE,
    units                bigint NOT NULL CHECK (units > 0),
    amount_minor         bigint NOT NULL CHECK (amount_minor > 0),
    currency             text NOT NULL,
    checkout_session_id  text UNIQUE,
    checkout_url         text NOT NULL DEFAULT '',
    status               text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'paid')),
    grant_id             uuid,
    paid_at              timestamptz,
    created_at           timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX credit_topups_tenant ON credit_topups (tenant_id, created_at DESC);
