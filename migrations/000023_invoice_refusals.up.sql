-- Schema v23: invoices the payment provider refused for good, invoices
-- billed outside Tollgate, and top-ups whose checkout never opened.
--
-- push_state: failed when the provider refused the invoice in a way that
-- retrying cannot change (an amount it does not take, whatever the
-- deployment) or its draft was deleted there; billed_outside when an
-- operator closed it out as billed by other means. Neither is pushed
-- again. push_generation counts the times an operator re-targeted the
-- invoice (admin invoices retarget): a push after one uses idempotency
-- keys of their own, so that the provider does not answer it with what it
-- answered the earlier pushes.
ALTER TABLE invoices DROP CONSTRAINT invoices_push_state_check,
    ADD CONSTRAINT invoices_push_state_check CHECK (push_state IN ('pending', 'pushed', 'failed', 'billed_outside')),
    ADD COLUMN push_generation int NOT NULL DEFAULT 0;

-- A top-up whose checkout the provider did not open is cancelled rather
-- than deleted: its credits.topup audit entry names it.
ALTER TABLE credit_topups DROP CONSTRAINT credit_topups_status_check,
    ADD CONSTRAINT credit_topups_status_check CHECK (status IN ('open', 'paid', 'cancelled'));
