-- +goose Up
-- The archive's index on published_at: retention deletes the rows past the
-- period from the day's partition that straddles the cutoff in bounded
-- batches (package outbox, PurgeArchive), found through it; without it
-- each batch would scan the partition from its first page. The relay
-- appends in published_at order, so the index grows at its right edge.
-- New partitions get it when they are attached.
CREATE INDEX outbox_archive_published_at_idx ON platform.outbox_archive (published_at);

-- +goose Down
DROP INDEX platform.outbox_archive_published_at_idx;
