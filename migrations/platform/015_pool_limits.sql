-- Live limits (docs/operations.md, "Limits"): the kill switch, a pool's limits set at
-- runtime, and the daemons running each pool (to share its rate).
--
-- platform.service_pause is the kill switch of a service (PauseAll): while
-- a row holds paused, every pool of the service consumes nothing, on every
-- daemon sharing this database and from a cold start. Absent: not held.
--
-- platform.pool_limits overrides a pool's config `limits` (SetPoolLimits):
-- rate in events per second for the pool across every daemon (0: none),
-- burst (0: the rate), concurrency (0: the config's). Absent: the config's.
--
-- platform.pool_member is one row per daemon running a pool, its heartbeat
-- refreshed every second: a daemon's share of a pool's rate is the rate
-- divided by the members whose heartbeat is recent.
--
-- The audit log's CHECK is widened with this migration's actions from
-- whatever it holds now (another migration may have widened it too), so
-- that no list of earlier actions is repeated here.

-- +goose Up
CREATE TABLE platform.service_pause (
    service    text        PRIMARY KEY,
    paused     boolean     NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL DEFAULT ''
);

CREATE TABLE platform.pool_limits (
    pool        text             PRIMARY KEY,
    rate        double precision NOT NULL CHECK (rate >= 0 AND rate <> 'NaN' AND rate <> 'Infinity'),
    burst       integer          NOT NULL CHECK (burst >= 0),
    concurrency integer          NOT NULL CHECK (concurrency >= 0),
    reason      text             NOT NULL DEFAULT '',
    updated_at  timestamptz      NOT NULL DEFAULT now(),
    updated_by  text             NOT NULL DEFAULT ''
);

CREATE TABLE platform.pool_member (
    pool         text        NOT NULL,
    member       text        NOT NULL,
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (pool, member)
);

-- +goose StatementBegin
DO $$
DECLARE
    def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO def FROM pg_constraint
    WHERE conrelid = 'platform.audit_log'::regclass AND conname = 'audit_log_action_check';
    IF def IS NULL OR position('ARRAY[' IN def) = 0 THEN
        RAISE EXCEPTION 'platform.audit_log_action_check is not a list of actions: %', def;
    END IF;
    def := replace(def, 'ARRAY[', 'ARRAY[''service.pause''::text, ''service.resume''::text, ''pool.limits''::text, ');
    ALTER TABLE platform.audit_log DROP CONSTRAINT audit_log_action_check;
    EXECUTE 'ALTER TABLE platform.audit_log ADD CONSTRAINT audit_log_action_check ' || def;
END
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    def text;
BEGIN
    SELECT pg_get_constraintdef(oid) INTO def FROM pg_constraint
    WHERE conrelid = 'platform.audit_log'::regclass AND conname = 'audit_log_action_check';
    def := replace(def, '''service.pause''::text, ''service.resume''::text, ''pool.limits''::text, ', '');
    ALTER TABLE platform.audit_log DROP CONSTRAINT audit_log_action_check;
    EXECUTE 'ALTER TABLE platform.audit_log ADD CONSTRAINT audit_log_action_check ' || def;
END
$$;
-- +goose StatementEnd
DROP TABLE IF EXISTS platform.pool_member;
DROP TABLE IF EXISTS platform.pool_limits;
DROP TABLE IF EXISTS platform.service_pause;
