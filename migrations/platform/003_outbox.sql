-- The outbox (docs/contracts.md, "Outbox, archive and replay"): messages a
-- service emits, written in the
-- writer's own transaction and published by platformd's relay after the
-- commit. A row leaves the table only once the broker confirmed its message.

-- +goose Up
CREATE TABLE platform.outbox (
    event_id    uuid        PRIMARY KEY,
    event_name  text        NOT NULL,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    payload     jsonb       NOT NULL,
    headers     jsonb       NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now()
);

-- platform.uuid_v7 returns a UUID v7 (RFC 9562): 48 bits of Unix time in
-- milliseconds, the version, 12 bits of sub-millisecond time (method 3 of the
-- RFC, so ids minted by one session are ordered to the microsecond), the
-- variant and 62 random bits. PostgreSQL 15 has no uuidv7(); the random bits
-- come from gen_random_uuid(), whose variant bits are already RFC 9562's.
-- +goose StatementBegin
CREATE FUNCTION platform.uuid_v7() RETURNS uuid
LANGUAGE plpgsql VOLATILE PARALLEL SAFE AS $$
DECLARE
    us  bigint := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    sub int    := ((us % 1000) * 4096 / 1000)::int;
    b   bytea  := uuid_send(gen_random_uuid());
BEGIN
    b := overlay(b PLACING substring(int8send(us / 1000) FROM 3) FROM 1 FOR 6);
    b := set_byte(b, 6, 112 | (sub >> 8)); -- version 7 (0111) and the top 4 bits of sub
    b := set_byte(b, 7, sub & 255);
    RETURN encode(b, 'hex')::uuid;
END
$$;
-- +goose StatementEnd

-- platform.publish writes one outbox row in the caller's transaction and
-- returns its new UUID v7 event_id. It refuses what the relay could not
-- publish as the contract's envelope: an event name that is not dot-separated
-- words of letters, digits, '_' and '-' (at most 255 bytes, it is the routing
-- key), a payload or headers that are not JSON objects.
-- +goose StatementBegin
CREATE FUNCTION platform.publish(event_name text, payload jsonb, headers jsonb DEFAULT '{}')
RETURNS uuid LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    id uuid := platform.uuid_v7();
BEGIN
    IF publish.event_name IS NULL OR octet_length(publish.event_name) > 255
       OR publish.event_name !~ '^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$' THEN
        RAISE EXCEPTION 'platform.publish: invalid event name %: want dot-separated words of letters, digits, _ and - (at most 255 bytes)',
            quote_nullable(publish.event_name) USING ERRCODE = '22023';
    END IF;
    IF publish.payload IS NULL OR jsonb_typeof(publish.payload) <> 'object' THEN
        RAISE EXCEPTION 'platform.publish: payload must be a JSON object, got %', coalesce(jsonb_typeof(publish.payload), 'NULL')
            USING ERRCODE = '22023';
    END IF;
    IF publish.headers IS NOT NULL AND jsonb_typeof(publish.headers) <> 'object' THEN
        RAISE EXCEPTION 'platform.publish: headers must be a JSON object, got %', jsonb_typeof(publish.headers)
            USING ERRCODE = '22023';
    END IF;
    INSERT INTO platform.outbox (event_id, event_name, payload, headers)
    VALUES (id, publish.event_name, publish.payload, coalesce(publish.headers, '{}'));
    RETURN id;
END
$$;
-- +goose StatementEnd

-- One notification per inserting statement (not per row: cheaper, and
-- PostgreSQL folds identical notifications of a transaction into one) wakes
-- the relay at the writer's commit, whoever the writer is: platform.publish,
-- consumer.Publish or a plain INSERT from any language.
-- +goose StatementBegin
CREATE FUNCTION platform.outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('platform_outbox', '');
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER outbox_notify AFTER INSERT ON platform.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION platform.outbox_notify();

-- +goose Down
DROP TABLE IF EXISTS platform.outbox;
DROP FUNCTION IF EXISTS platform.outbox_notify();
DROP FUNCTION IF EXISTS platform.publish(text, jsonb, jsonb);
DROP FUNCTION IF EXISTS platform.uuid_v7();
