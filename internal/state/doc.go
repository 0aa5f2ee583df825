// Package state reads and writes the platform schema of a service
// database: the replay horizon in force and its audit trail, pool pause
// state, and the purge history. This state is shared by every daemon using
// the database and survives restarts; changes are announced with
// PostgreSQL NOTIFY so other daemons apply them within seconds.
package state
