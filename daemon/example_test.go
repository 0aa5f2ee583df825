package daemon_test

import (
	"context"
	"fmt"
	"os"

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
