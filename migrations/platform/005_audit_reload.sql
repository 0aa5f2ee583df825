-- Config reloads (SIGHUP, the ReloadConfig RPC) are audited like horizon
-- changes: who reloaded, when, and what the reload changed.

-- +goose Up
ALTER TABLE platform.audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE platform.audit_log ADD CONSTRAINT audit_log_action_check CHECK (action IN
    ('pool.pause', 'pool.resume', 'horizon.set', 'purge.run', 'failed.retry', 'config.reload'));

-- +goose Down
ALTER TABLE platform.audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE platform.audit_log ADD CONSTRAINT audit_log_action_check CHECK (action IN
    ('pool.pause', 'pool.resume', 'horizon.set', 'purge.run', 'failed.retry'));
