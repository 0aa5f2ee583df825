-- The order service's own table (the seed's producer): each order is
-- written with its outbox rows (platform.outbox) in one transaction, and
-- platformd's relay publishes them after the commit.

-- +goose Up
CREATE TABLE IF NOT EXISTS orders (
    id          uuid        PRIMARY KEY,
    customer_id uuid        NOT NULL,
    lines       jsonb       NOT NULL,
    status      text        NOT NULL,
    version     integer     NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS orders;
