-- Platform state shared by every daemon using this service database and kept
-- across restarts: the horizon in force and its audit trail, pool pause
-- state, and the purge history.

-- +goose Up
CREATE SCHEMA IF NOT EXISTS platform;

-- The replay horizon in force for a service; absent means the config's
-- default applies.
CREATE TABLE platform.service_horizon (
    service    text        PRIMARY KEY,
    horizon    interval    NOT NULL CHECK (horizon > interval '0'),
    forced     boolean     NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL
);

-- Every horizon change, who made it and when.
CREATE TABLE platform.horizon_audit (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    service     text        NOT NULL,
    old_horizon interval,
    new_horizon interval    NOT NULL,
    forced      boolean     NOT NULL,
    changed_at  timestamptz NOT NULL DEFAULT now(),
    changed_by  text        NOT NULL
);

-- Pause state per pool; absent means running.
CREATE TABLE platform.pool_state (
    pool       text        PRIMARY KEY,
    paused     boolean     NOT NULL,
    reason     text        NOT NULL DEFAULT '',
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text        NOT NULL DEFAULT ''
);

-- One row per purge run, scheduled or asked for through the admin API.
CREATE TABLE platform.purge_run (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    service     text        NOT NULL,
    trigger     text        NOT NULL CHECK (trigger IN ('schedule', 'admin')),
    dry_run     boolean     NOT NULL DEFAULT false,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    cutoff      timestamptz,
    deleted     bigint      NOT NULL DEFAULT 0,
    error       text,
    daemon      text        NOT NULL DEFAULT ''
);
CREATE INDEX purge_run_service_started_idx ON platform.purge_run (service, started_at DESC);

-- +goose Down
DROP SCHEMA IF EXISTS platform CASCADE;
