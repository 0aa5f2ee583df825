package session

import (
	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/internal/query"
)

// This file holds every statement the session runs of its own, each named
// (package query): "session.listen" is what pg_stat_activity and the
// errors show. The statements run through Do are their callers'.

// setApplicationName names the session apart in pg_stat_activity;
// set_config takes the name as an argument where SET takes none.
var setApplicationName = query.NewExec("session.set_application_name", `SELECT set_config('application_name', $1, false)`,
	func(name string) []any { return []any{name} })

// listen is LISTEN on a channel, whose name cannot be an argument.
var listen = query.BuildExec("session.listen", listenSQL, nil)

func listenSQL(channel string) string { return "LISTEN " + pgx.Identifier{channel}.Sanitize() }
