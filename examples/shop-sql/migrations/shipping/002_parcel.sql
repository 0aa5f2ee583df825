-- The shipping service's parcels: one per order whose stock was reserved
-- (stock.stock.reserved.v1). Cumulative, like reservations: a duplicate
-- delivery applied twice would make a second parcel.

-- +goose Up
CREATE TABLE IF NOT EXISTS parcel (
    id          uuid        PRIMARY KEY,
    order_id    uuid        NOT NULL,
    customer_id uuid        NOT NULL,
    items       integer     NOT NULL CHECK (items > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS parcel_order_idx ON parcel (order_id);

-- +goose Down
DROP TABLE IF EXISTS parcel;
