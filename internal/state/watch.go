package state

import (
	"context"
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/platformd/platformd/internal/startstop"
)

// Watch LISTENs on channels over a connection of its own from db and calls
// fn for every notification, until ctx ends. A lost connection is
// re-established with backoff; after each (re)connection fn is called once
// with an empty payload on every channel, so the caller re-reads state it
// may have missed. fn runs on Watch's goroutine and must not block long.
func Watch(ctx context.Context, db *pgxpool.Pool, channels []string, fn func(channel, payload string), logger *slog.Logger) {
	var backoff startstop.Backoff
	for ctx.Err() == nil {
		err := watchOnce(ctx, db, channels, fn)
		if ctx.Err() != nil {
			return
		}
		wait := backoff.Next()
		logger.WarnContext(ctx, "state: watch lost, reconnecting", slog.Any("error", err), slog.Duration("backoff", wait))
		if !startstop.Sleep(ctx, wait) {
			return
		}
	}
}

func watchOnce(ctx context.Context, db *pgxpool.Pool, channels []string, fn func(channel, payload string)) error {
	pc, err := db.Acquire(ctx)
	if err != nil {
		return err
	}
	// A LISTENing session must not go back to the pool.
	conn := pc.Hijack()
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	for _, ch := range channels {
		if _, err := listen.Run(ctx, conn, ch); err != nil {
			return err
		}
	}
	for _, ch := range channels {
		fn(ch, "")
	}
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		fn(n.Channel, n.Payload)
	}
}
