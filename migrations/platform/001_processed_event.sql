-- processed_event is the dedup table of the seed article, exactly: one row
-- per event id a service has applied, written in the same transaction as the
-- handlers' effects.

-- +goose Up
CREATE TABLE IF NOT EXISTS processed_event (
    event_id     uuid        PRIMARY KEY,
    processed_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS processed_event_processed_at_idx ON processed_event (processed_at);

-- +goose Down
DROP TABLE IF EXISTS processed_event;
