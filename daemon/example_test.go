package daemon_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/daemon"
)

// A team's own platformd: its handlers registered, then the stock command
// line. Here it checks a configuration whose pool uses the handler.
func Example() {
	reg := consumer.NewRegistry()
	reg.MustRegister(consumer.Registration{
		Name:   "billing.open_invoice",
		Events: []string{"order.order.placed.v1"},
		Handler: consumer.HandlerFunc(func(ctx context.Context, tx pgx.Tx, ev consumer.Event) error {
			_, err := tx.Exec(ctx, `INSERT INTO invoice (order_id) VALUES (($1::jsonb->>'order_id')::uuid)`, string(ev.Payload))
			return err
		}),
	})
	// In a main function: os.Exit(daemon.Main(os.Args[1:], reg, os.Stderr)).
	code := daemon.Main([]string{"check", "-config", "testdata/billing.yaml"}, reg, os.Stdout)
	fmt.Println("exit code", code)
	// Output:
	// platformd: testdata/billing.yaml is valid (1 services)
	// exit code 0
}

// A daemon in a Go program that manages its own lifecycle: load the
// config, run it in the background, wait until it is ready, stop it (it
// drains first). Run installs no signal handler; Main does.
func ExampleNew() {
	reg := consumer.NewRegistry()
	reg.MustRegister(consumer.Registration{
		Name:   "billing.open_invoice",
		Events: []string{"order.order.placed.v1"},
		Handler: consumer.HandlerFunc(func(context.Context, pgx.Tx, consumer.Event) error {
			return nil
		}),
	})
	cfg, err := daemon.ParseConfig("billing.yaml", []byte(`log: {level: error}
admin: {listen: "127.0.0.1:0"}
metrics: {listen: "-"}
broker: {exchange: example.events}
services:
  - name: billing
    database: postgres://postgres@127.0.0.1:5432/platformd_example
    pools:
      - name: billing-events
        queue: example.billing.events
        queue_type: classic
        bindings: [order.order.placed.v1]
        handlers: [billing.open_invoice]
`), reg)
	if err != nil {
		fmt.Println(err)
		return
	}
	d, err := daemon.New(cfg, reg, daemon.WithCreateDatabases())
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- d.Run(context.Background()) }()
	select {
	case <-d.Ready():
		fmt.Println("ready, admin API listening:", d.AdminAddr() != "")
	case err := <-done:
		fmt.Println("start failed:", err)
		return
	case <-time.After(time.Minute):
		fmt.Println("not ready within a minute")
		d.Stop()
		return
	}
	d.Stop()
	fmt.Println("stopped:", <-done)
	// Output:
	// ready, admin API listening: true
	// stopped: <nil>
}
