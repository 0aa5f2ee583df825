package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/platformd/platformd/internal/dbutil"
)

// PurgeLockName returns the name the purge lock of service is derived
// from; the advisory lock key is hashtextextended(name, 0), computed by the
// server so that every daemon on it agrees.
func PurgeLockName(service string) string { return "platformd.purge." + service }

// lockReleaseTimeout bounds the unlock, run after the purge even when its
// context was cancelled.
const lockReleaseTimeout = 5 * time.Second

// purgeLock is a held session-level advisory lock and the pooled
// connection whose session holds it.
type purgeLock struct {
	conn *pgxpool.Conn
	name string
}

// tryPurgeLock takes service's purge lock without waiting. It returns nil
// and no error when another session holds it.
func tryPurgeLock(ctx context.Context, db *pgxpool.Pool, service string) (*purgeLock, error) {
	l, err := tryPurgeLockOnce(ctx, db, service)
	if err != nil && ctx.Err() == nil && deadConn(err) {
		// A pooled connection killed since its last use (a failover, an
		// operator's pg_terminate_backend) fails its first query; the next
		// acquire gets a fresh one.
		return tryPurgeLockOnce(ctx, db, service)
	}
	return l, err
}

// deadConn reports whether err says the connection itself was lost.
func deadConn(err error) bool {
	if dbutil.ConnectionLost(err) {
		return true
	}
	return pgconn.SafeToRetry(err) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

func tryPurgeLockOnce(ctx context.Context, db *pgxpool.Pool, service string) (*purgeLock, error) {
	name := PurgeLockName(service)
	conn, err := db.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("acquire connection for purge lock: %w", err)
	}
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtextextended($1, 0))`, name).Scan(&ok); err != nil {
		// The lock may or may not have been taken: end the session so that
		// it cannot stay behind on a pooled connection.
		closeConn(ctx, conn)
		return nil, fmt.Errorf("take purge lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, nil
	}
	return &purgeLock{conn: conn, name: name}, nil
}

// release unlocks and returns the connection to the pool. If the unlock
// cannot be confirmed, the connection is closed instead, which ends the
// session and so frees the lock. It runs even when ctx is done.
func (l *purgeLock) release(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
	defer cancel()
	var ok bool
	err := l.conn.QueryRow(ctx, `SELECT pg_advisory_unlock(hashtextextended($1, 0))`, l.name).Scan(&ok)
	if err == nil && !ok {
		// The session no longer held it (released behind our back).
		err = errors.New("lock was not held")
	}
	if err != nil {
		closeConn(ctx, l.conn)
		return fmt.Errorf("release purge lock: %w", err)
	}
	l.conn.Release()
	return nil
}

// closeConn takes conn out of the pool and closes it, even when ctx is
// done.
func closeConn(ctx context.Context, conn *pgxpool.Conn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lockReleaseTimeout)
	defer cancel()
	_ = conn.Hijack().Close(ctx)
}
