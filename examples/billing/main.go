package main

import (
	"fmt"
	"os"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
)

func main() {
	reg := consumer.NewRegistry()
	if err := register(reg); err != nil {
		fmt.Fprintln(os.Stderr, "billing:", err)
		os.Exit(2)
	}
	os.Exit(daemon.Main(os.Args[1:], reg, os.Stderr))
}
