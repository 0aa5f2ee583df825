package dbutil

import (
	"errors"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
)

// Fault says whose fault a PostgreSQL error is, which decides what is done
// with the work that met it. Every part of platformd that sorts database
// errors asks Classify; SQLSTATEs are named by jackc/pgerrcode.
type Fault uint8

// The faults Classify tells apart.
const (
	// FaultOther is any other error: a statement failing for a reason the
	// same statement may not meet next time. Retried through the pool's
	// retry delays.
	FaultOther Fault = iota
	// FaultData is PostgreSQL refusing the data itself: SQLSTATE class 22
	// (data exception) or 23 (integrity constraint violation). The same
	// statement with the same values is refused every time: permanent.
	FaultData
	// FaultConflict is a transaction that lost to another: a deadlock
	// (40P01) or a serialization failure (40001). Retried at once.
	FaultConflict
	// FaultInfra is the database or the connection failing, not the work:
	// class 08 (connection exception), 53 (insufficient resources), 57
	// (operator intervention: shutdowns; but 57014, a statement that ran
	// past statement_timeout, is FaultOther), 58 (system error), or a
	// connection that could not be made. Whether the work committed is
	// not known.
	FaultInfra
)

// Classify returns err's fault (FaultOther for nil and for errors that are
// not PostgreSQL's).
func Classify(err error) Fault {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		switch {
		case pgerrcode.IsDataException(code), pgerrcode.IsIntegrityConstraintViolation(code):
			return FaultData
		case code == pgerrcode.DeadlockDetected, code == pgerrcode.SerializationFailure:
			return FaultConflict
		case code == pgerrcode.QueryCanceled:
			return FaultOther
		case pgerrcode.IsConnectionException(code), pgerrcode.IsInsufficientResources(code),
			pgerrcode.IsOperatorIntervention(code), pgerrcode.IsSystemError(code):
			return FaultInfra
		}
		return FaultOther
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		return FaultInfra
	}
	return FaultOther
}

// DataError reports whether err is PostgreSQL refusing the data itself
// (FaultData): no retry can fix it.
func DataError(err error) bool { return Classify(err) == FaultData }

// ConflictCode returns err's SQLSTATE when it is a deadlock or a
// serialization failure (FaultConflict).
func ConflictCode(err error) (string, bool) {
	var pgErr *pgconn.PgError
	if Classify(err) != FaultConflict || !errors.As(err, &pgErr) {
		return "", false
	}
	return pgErr.Code, true
}

// CheckViolation reports whether err is a CHECK constraint (or a
// partition bound) refusing a row: SQLSTATE 23514.
func CheckViolation(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == pgerrcode.CheckViolation
}
