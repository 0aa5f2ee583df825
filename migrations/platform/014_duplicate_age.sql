-- Duplicate ages (docs/operations.md, "Tuning a horizon").
--
-- For every duplicate a pool skips, platformd notes the event's age (the
-- time of the skip minus the time in its UUID v7 id, or its occurred_at)
-- by source (redelivery, republish, replay). Each pool accumulates them in
-- memory and adds them here at most once a minute, and when it stops: one
-- row per day (UTC), pool and source, shared by every daemon. The upsert
-- is additive (counts and buckets add, max_age_seconds keeps the greater),
-- so several daemons writing the same row are all counted.
--
-- buckets[i] (1-based) counts the ages in (2^((i-2)/8), 2^((i-1)/8)]
-- seconds, buckets[1] those up to 1 s, the last one everything above
-- 2^23 s (97 days): 186 buckets, each about 9% wide, enough for a p99.9
-- read to within a bucket (package state, DuplicateAgeBucketBound).

-- +goose Up
CREATE TABLE platform.duplicate_age (
    day             date             NOT NULL,
    pool            text             NOT NULL,
    source          text             NOT NULL CHECK (source IN ('redelivery', 'republish', 'replay')),
    count           bigint           NOT NULL DEFAULT 0,
    max_age_seconds double precision NOT NULL DEFAULT 0,
    buckets         bigint[]         NOT NULL DEFAULT '{}',
    updated_at      timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (day, pool, source)
);

-- +goose Down
DROP TABLE IF EXISTS platform.duplicate_age;
