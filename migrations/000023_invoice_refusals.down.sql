-- Schema v22 had neither state: a failed invoice becomes pending again
-- (retried, as it was), one billed outside Tollgate pushed (nothing left
-- to push), and a cancelled top-up goes, as v22 removed them.
UPDATE invoices SET push_state = 'pending' WHERE push_state = 'failed';
UPDATE invoices SET push_state = 'pushed' WHERE push_state = 'billed_outside';
ALTER TABLE invoices DROP COLUMN push_generation,
    DROP CONSTRAINT invoices_push_state_check,
    ADD CONSTRAINT invoices_push_state_check CHECK (push_state IN ('pending', 'pushed'));

DELETE FROM credit_topups WHERE status = 'cancelled';
ALTER TABLE credit_topups DROP CONSTRAINT credit_topups_status_check,
    ADD CONSTRAINT credit_topups_status_check CHECK (status IN ('open', 'paid'));
