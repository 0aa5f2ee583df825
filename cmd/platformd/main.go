// Command platformd runs the idempotent consumer platform: named RabbitMQ
// worker pools whose handlers' database effects happen exactly once, the
// processed_event purge scheduler, and the admin gRPC API.
//
//	platformd run -config F      migrate, then consume until SIGINT/SIGTERM
//	platformd migrate -config F  apply migrations to every service database
//	platformd check -config F    validate the configuration only
//	platformd try -config F ...  one event through a handler, rolled back
//
// This is the release binary: it registers no Go handler. Services are
// hosted by the SQL handlers (sql_handlers) and remote handlers
// (remote_handlers) their config declares. A team with Go handlers builds
// its own main instead, as examples/shop/cmd/shopd does for the example
// shop: register them in a consumer.Registry and call daemon.Main, which
// gives that binary every command and flag of this one.
package main

import (
	"os"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
)

func main() {
	// Empty on purpose: no demo code ships in the release binary.
	os.Exit(daemon.Main(os.Args[1:], consumer.NewRegistry(), os.Stderr))
}
