-- Failures as data (package failure).
--
-- platform.failed_event replaces the <queue>.failed queue: a message that
-- fails its last attempt, or at once (decode, no_handler, permanent,
-- beyond_horizon), is a row here, committed before its delivery is acked.
-- A row is one failure of one pool: failure_key is the event id, or for a
-- body that did not decode (no event id) "sha256:" and the body's digest,
-- so that a redelivered or republished copy of the same failure adds to
-- copies instead of making a second row.
--
-- state moves failed -> retrying -> resolved (the transaction that applies
-- the retried copy, or finds it a duplicate, resolves it) or back to
-- failed; discarded is an operator's choice. In a pool with ordered
-- failures, a later event of a key whose head failed (or waits in a retry
-- delay: state retrying, reason retrying) is stored parked, and released in
-- id order once no earlier row of its key is unresolved. Ids are UUID v7,
-- minted when the row is first written: their order is arrival order.
--
-- fingerprint is error with its uuids, numbers and quoted values replaced
-- by placeholders, computed when the row is written, so that grouping a
-- million rows by cause is an index scan, not a regex per row.

-- +goose Up
CREATE TABLE platform.failed_event (
    id              uuid        PRIMARY KEY,
    pool            text        NOT NULL,
    failure_key     text        NOT NULL,
    event_id        uuid,
    event_name      text        NOT NULL DEFAULT '',
    routing_key     text        NOT NULL DEFAULT '',
    headers         jsonb       NOT NULL DEFAULT '{}',
    body            bytea       NOT NULL,
    reason          text        NOT NULL CHECK (reason IN ('decode', 'no_handler', 'permanent',
                        'retries_exhausted', 'beyond_horizon', 'parked', 'retrying')),
    error           text        NOT NULL DEFAULT '',
    fingerprint     text        NOT NULL DEFAULT '',
    handler         text        NOT NULL DEFAULT '',
    attempt         integer     NOT NULL DEFAULT 0,
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    failed_at       timestamptz NOT NULL DEFAULT now(),
    copies          integer     NOT NULL DEFAULT 1,
    sequence_key    text,
    state           text        NOT NULL CHECK (state IN ('failed', 'parked', 'retrying', 'resolved', 'discarded')),
    resolved_at     timestamptz,
    resolved_by     text,
    edited_body     bytea,
    edited_at       timestamptz,
    edited_by       text,
    retry_id        uuid,
    updated_at      timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX failed_event_key_idx ON platform.failed_event (pool, failure_key);
-- The workbench's filters: by state and time, by pool, by cause.
CREATE INDEX failed_event_state_failed_at_idx ON platform.failed_event (state, failed_at);
CREATE INDEX failed_event_pool_state_idx ON platform.failed_event (pool, state, failed_at);
CREATE INDEX failed_event_fingerprint_idx ON platform.failed_event (fingerprint, state);
CREATE INDEX failed_event_event_id_idx ON platform.failed_event (event_id);
-- The ordered pools' per-batch check and the release of parked rows.
CREATE INDEX failed_event_open_key_idx ON platform.failed_event (pool, sequence_key, id)
    WHERE sequence_key IS NOT NULL AND state IN ('failed', 'parked', 'retrying');
-- Retention: resolved and discarded rows past services[].failures.retention.
CREATE INDEX failed_event_closed_idx ON platform.failed_event (updated_at)
    WHERE state IN ('resolved', 'discarded');

-- An operator's edits of a failure: the body before and after, and the
-- JSON diff between them (the audit log holds the diff too).
CREATE TABLE platform.failed_event_edit (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    failure_id  uuid        NOT NULL REFERENCES platform.failed_event (id) ON DELETE CASCADE,
    edited_at   timestamptz NOT NULL DEFAULT now(),
    edited_by   text        NOT NULL,
    reason      text        NOT NULL DEFAULT '',
    body_before bytea       NOT NULL,
    body_after  bytea       NOT NULL,
    diff        jsonb       NOT NULL DEFAULT '[]'
);
CREATE INDEX failed_event_edit_failure_idx ON platform.failed_event_edit (failure_id, id);

-- Server-side retries of a selection of failures: the selection is frozen
-- when the retry is created (failure_retry_item), so failures stored later
-- are not in it; seq orders sending (canary items first).
CREATE TABLE platform.failure_retry (
    id           uuid        PRIMARY KEY,
    state        text        NOT NULL CHECK (state IN ('canary', 'running', 'done', 'canary_failed', 'cancelled')),
    filter       jsonb       NOT NULL,
    canary       integer     NOT NULL DEFAULT 0,
    rate         integer     NOT NULL CHECK (rate > 0),
    selected     bigint      NOT NULL,
    sent         bigint      NOT NULL DEFAULT 0,
    error        text        NOT NULL DEFAULT '',
    created_by   text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    finished_at  timestamptz,
    cancelled_by text        NOT NULL DEFAULT ''
);
CREATE INDEX failure_retry_created_at_idx ON platform.failure_retry (created_at DESC);
CREATE INDEX failure_retry_open_idx ON platform.failure_retry (created_at) WHERE state IN ('canary', 'running');

CREATE TABLE platform.failure_retry_item (
    retry_id   uuid        NOT NULL REFERENCES platform.failure_retry (id) ON DELETE CASCADE,
    seq        bigint      NOT NULL,
    failure_id uuid        NOT NULL,
    canary     boolean     NOT NULL DEFAULT false,
    sent_at    timestamptz,
    PRIMARY KEY (retry_id, seq)
);
CREATE INDEX failure_retry_item_failure_idx ON platform.failure_retry_item (failure_id);

ALTER TABLE platform.audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE platform.audit_log ADD CONSTRAINT audit_log_action_check CHECK (action IN
    ('pool.pause', 'pool.resume', 'horizon.set', 'purge.run', 'failed.retry', 'config.reload',
     'replay.start', 'replay.cancel', 'failure.retry', 'failure.retry_cancel', 'failure.discard',
     'failure.edit'));

-- +goose Down
ALTER TABLE platform.audit_log DROP CONSTRAINT audit_log_action_check;
ALTER TABLE platform.audit_log ADD CONSTRAINT audit_log_action_check CHECK (action IN
    ('pool.pause', 'pool.resume', 'horizon.set', 'purge.run', 'failed.retry', 'config.reload',
     'replay.start', 'replay.cancel'));
DROP TABLE IF EXISTS platform.failure_retry_item;
DROP TABLE IF EXISTS platform.failure_retry;
DROP TABLE IF EXISTS platform.failed_event_edit;
DROP TABLE IF EXISTS platform.failed_event;
