// Command platformd runs the idempotent consumer platform: named RabbitMQ
// worker pools whose handlers' database effects happen exactly once, the
// processed_event purge scheduler, and the admin gRPC API.
//
//	platformd run -config F      migrate, then consume until SIGINT/SIGTERM
//	platformd migrate -config F  apply migrations to every service database
//	platformd check -config F    validate the configuration only
//
// This binary registers the example shop's handlers (examples/shop). A team
// with its own handlers builds its own main: register them in a
// consumer.Registry and call daemon.Main.
package main

import (
	"os"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
	"github.com/platformd/platformd/examples/shop"
)

func main() {
	reg := consumer.NewRegistry()
	if err := shop.Register(reg); err != nil {
		panic(err)
	}
	os.Exit(daemon.Main(os.Args[1:], reg, os.Stderr))
}
