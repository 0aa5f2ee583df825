-- platform.audit_log: who paused, resumed, set a horizon (forced or not),
-- purged (dry or not) and retried failed messages, and when. Append-only:
-- rows are never updated or deleted (a trigger refuses it), so the trail
-- cannot be rewritten by the daemon or by an operator's stray statement.
-- The horizon changes recorded so far in platform.horizon_audit are copied
-- in, so the list starts complete.

-- +goose Up
CREATE TABLE platform.audit_log (
    id     bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL,
    action text        NOT NULL CHECK (action IN
               ('pool.pause', 'pool.resume', 'horizon.set', 'purge.run', 'failed.retry')),
    target text        NOT NULL,
    detail jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX audit_log_at_idx ON platform.audit_log (at DESC, id DESC);

-- +goose StatementBegin
CREATE FUNCTION platform.audit_log_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'platform.audit_log is append-only (% refused)', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER audit_log_append_only
    BEFORE UPDATE OR DELETE OR TRUNCATE ON platform.audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION platform.audit_log_append_only();

-- go_duration renders an interval the way Go's time.Duration prints it
-- (336h0m0s), the form the daemon writes in detail.
-- +goose StatementBegin
CREATE FUNCTION pg_temp.go_duration(i interval) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT floor(extract(epoch FROM i) / 3600)::bigint || 'h'
        || floor(mod(extract(epoch FROM i), 3600) / 60)::bigint || 'm'
        || trim_scale(mod(extract(epoch FROM i), 60)) || 's'
$$;
-- +goose StatementEnd

INSERT INTO platform.audit_log (at, actor, action, target, detail)
SELECT changed_at, changed_by, 'horizon.set', service,
       jsonb_build_object('from', pg_temp.go_duration(old_horizon),
                          'to', pg_temp.go_duration(new_horizon),
                          'forced', forced)
FROM platform.horizon_audit
ORDER BY id;

-- +goose Down
DROP TABLE IF EXISTS platform.audit_log;
DROP FUNCTION IF EXISTS platform.audit_log_append_only();
