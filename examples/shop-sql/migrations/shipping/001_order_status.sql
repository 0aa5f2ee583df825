-- The shipping service's local copy of each order's status (seed, step 6).

-- +goose Up
CREATE TABLE IF NOT EXISTS order_status (
    order_id   uuid        PRIMARY KEY,
    status     text        NOT NULL,
    version    integer     NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS order_status;
