-- The billing service's own table: one invoice per order placed.
-- No unique constraint on order_id: the insert is cumulative, so a
-- duplicate applied twice would show as two invoices (platformd's dedup
-- step is what keeps it at one).

-- +goose Up
CREATE TABLE IF NOT EXISTS invoice (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id    uuid          NOT NULL,
    customer_id uuid          NOT NULL,
    event_id    uuid          NOT NULL,
    lines       integer       NOT NULL CHECK (lines > 0),
    quantity    numeric(12,3) NOT NULL,
    opened_at   timestamptz   NOT NULL
);
CREATE INDEX IF NOT EXISTS invoice_order_idx ON invoice (order_id);

-- +goose Down
DROP TABLE IF EXISTS invoice;
