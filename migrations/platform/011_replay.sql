-- Archive and replay (docs/replay.md).
--
-- platform.outbox_archive keeps what the relay published, when the service's
-- outbox.archive is set: the relay moves each confirmed row here in the
-- transaction that deletes it from platform.outbox, so a row is always in
-- one of the two tables, and is archived once (the delete happens once).
-- It is range-partitioned by day on published_at: retention drops whole
-- partitions (the relay and the scheduler create them ahead), which costs
-- the same at ten rows as at ten million. The default partition takes rows
-- of a day without its partition (written by hand, or a clock far off):
-- creating that day's partition moves them in, and retention deletes those
-- past the period.
--
-- The primary key must hold the partition key, so event_id alone is not
-- unique across days: a producer that wrote an already archived id to the
-- outbox again gets a second archive row, and a replay sends the id once
-- (it reads DISTINCT ON event_id).
--
-- platform.replay holds the replays asked of this producer: their selection,
-- state, progress cursor (the last event id published, in event_id order)
-- and counts. One daemon runs them at a time (the replay lock).

-- +goose Up
CREATE TABLE platform.outbox_archive (
    event_id     uuid        NOT NULL,
    event_name   text        NOT NULL,
    occurred_at  timestamptz NOT NULL,
    payload      jsonb       NOT NULL,
    headers      jsonb       NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL,
    published_at timestamptz NOT NULL,
    PRIMARY KEY (event_id, published_at)
) PARTITION BY RANGE (published_at);
CREATE TABLE platform.outbox_archive_default PARTITION OF platform.outbox_archive DEFAULT;
CREATE INDEX outbox_archive_occurred_at_idx ON platform.outbox_archive (occurred_at, event_id);
CREATE INDEX outbox_archive_event_name_idx ON platform.outbox_archive (event_name, occurred_at);

CREATE TABLE platform.replay (
    id           uuid        PRIMARY KEY,
    state        text        NOT NULL CHECK (state IN ('running', 'done', 'cancelled', 'failed')),
    selection    jsonb       NOT NULL,
    target_pool  text        NOT NULL DEFAULT '',
    rate         integer     NOT NULL CHECK (rate > 0),
    matched      bigint      NOT NULL,
    published    bigint      NOT NULL DEFAULT 0,
    cursor       uuid,
    pools        jsonb       NOT NULL DEFAULT '[]',
    error        text        NOT NULL DEFAULT '',
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    cancelled_by text        NOT NULL DEFAULT ''
);
CREATE INDEX replay_created_at_idx ON platform.replay (created_at DESC);
CREATE INDEX replay_running_idx ON platform.replay (created_at) WHERE state = 'running';

ALTER TABLE platform.audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE platform.audit_log ADD CONSTRAINT audit_log_action_check CHECK (action IN
    ('pool.pause', 'pool.resume', 'horizon.set', 'purge.run', 'failed.retry', 'config.reload',
     'replay.start', 'replay.cancel'));

-- +goose Down
ALTER TABLE platform.audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE platform.audit_log ADD CONSTRAINT audit_log_action_check CHECK (action IN
    ('pool.pause', 'pool.resume', 'horizon.set', 'purge.run', 'failed.retry', 'config.reload'));
DROP TABLE IF EXISTS platform.replay;
DROP TABLE IF EXISTS platform.outbox_archive;
