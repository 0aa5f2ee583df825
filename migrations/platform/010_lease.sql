-- +goose Up
-- Leases: who runs a service's singleton work (the outbox relay, the
-- purge, replays) across daemons, without holding a database session
-- (package lease). A lease is held until expires_at, by the database's
-- clock, and renewed well before; a holder that cannot renew stops its
-- work before then, so that a newcomer may take it after expires_at.
CREATE TABLE platform.lease (
    name        text PRIMARY KEY,
    holder      text NOT NULL,
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL DEFAULT now(),
    renewed_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE platform.lease;
