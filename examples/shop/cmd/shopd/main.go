// Command shopd is the example shop's daemon: platformd with the shop's Go
// handlers (stock.reserve, stock.announce_reserved, shipping.track_status,
// shipping.prepare_parcel) registered. It has every command and flag of
// platformd:
//
//	shopd run -config examples/shop/platformd.yaml
//	shopd migrate -config F
//	shopd check -config F
//	shopd try -config F -handler stock.reserve -event FILE
//
// It is also the model of a team's own binary: it imports only the public
// packages (consumer, daemon, and the shop's handlers), registers the
// handlers in a consumer.Registry and hands the command line to
// daemon.Main. The release binary, cmd/platformd, registers none of them.
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
		// A name registered twice is a programming error of this file.
		panic(err)
	}
	os.Exit(daemon.Main(os.Args[1:], reg, os.Stderr))
}
