-- The stock service's effect table: one reservation per order line.

-- +goose Up
CREATE TABLE IF NOT EXISTS reservation (
    id         uuid          PRIMARY KEY,
    order_id   uuid          NOT NULL,
    product_id uuid          NOT NULL,
    quantity   numeric(12,3) NOT NULL CHECK (quantity > 0),
    created_at timestamptz   NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS reservation_order_idx ON reservation (order_id);

-- +goose Down
DROP TABLE IF EXISTS reservation;
