-- Who holds a notification's lease (shared/notify/claimant.py): a service restarted on the same machine after a
-- kill takes over the dead process's delivery at once instead of waiting out its lease.
ALTER TABLE notify_outbox ADD COLUMN claimed_by TEXT;
