// Command peer is the bench's Watermill contender: a Watermill router with
// the watermill-amqp subscriber, and a handler that does what the seed
// article's consumer does, one transaction per message (insert the event
// id ON CONFLICT DO NOTHING, reserve the order's lines only if it was new,
// commit), written the way Watermill's documentation shows a handler.
//
// It lives in its own Go module so that platformd's go.mod does not depend
// on Watermill; the bench builds it and runs it as a subprocess.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp091 "github.com/rabbitmq/amqp091-go"
)

// envelope is the platform's event envelope.
type envelope struct {
	EventID    uuid.UUID       `json:"event_id"`
	EventName  string          `json:"event_name"`
	OccurredAt time.Time       `json:"occurred_at"`
	Payload    json.RawMessage `json:"payload"`
}

// orderPlaced is the payload of order.order.placed.v1.
type orderPlaced struct {
	OrderID    uuid.UUID `json:"order_id"`
	CustomerID uuid.UUID `json:"customer_id"`
	Lines      []struct {
		ProductID uuid.UUID `json:"product_id"`
		Quantity  string    `json:"quantity"`
	} `json:"lines"`
}

func main() {
	amqpURL := flag.String("amqp", "amqp://guest:guest@127.0.0.1:5672/", "AMQP URL")
	dbURL := flag.String("db", "", "service database URL")
	queue := flag.String("queue", "", "queue to consume")
	queueType := flag.String("queue-type", "quorum", "x-queue-type the queue is declared with")
	handlers := flag.Int("handlers", 4, "router handlers on the queue (each its own subscription: Watermill's AMQP subscriber handles one message at a time per subscription)")
	prefetch := flag.Int("prefetch", 200, "prefetch per subscription")
	flag.Parse()
	if err := run(*amqpURL, *dbURL, *queue, *queueType, *handlers, *prefetch); err != nil {
		log.Fatal(err)
	}
}

func run(amqpURL, dbURL, queue, queueType string, handlers, prefetch int) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := watermill.NewSlogLogger(nil)

	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.MaxConns = int32(handlers)
	cfg.ConnConfig.RuntimeParams["application_name"] = "bench-peer"
	db, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer db.Close()

	amqpCfg := amqp.NewDurableQueueConfig(amqpURL)
	amqpCfg.Queue.Arguments = amqp091.Table{"x-queue-type": queueType}
	amqpCfg.Consume.Qos.PrefetchCount = prefetch
	sub, err := amqp.NewSubscriber(amqpCfg, logger)
	if err != nil {
		return err
	}
	router, err := message.NewRouter(message.RouterConfig{CloseTimeout: 10 * time.Second}, logger)
	if err != nil {
		return err
	}
	router.AddMiddleware(middleware.Recoverer)
	h := &reserveHandler{db: db}
	for i := range handlers {
		router.AddConsumerHandler("stock.reserve."+strconv.Itoa(i), queue, sub, h.Handle)
	}
	return router.Run(ctx)
}

type reserveHandler struct{ db *pgxpool.Pool }

// Handle processes one order.order.placed.v1 event in one transaction.
func (h *reserveHandler) Handle(msg *message.Message) error {
	ctx := msg.Context()
	var env envelope
	if err := json.Unmarshal(msg.Payload, &env); err != nil {
		return fmt.Errorf("decode envelope: %w", err)
	}
	var order orderPlaced
	if err := json.Unmarshal(env.Payload, &order); err != nil {
		return fmt.Errorf("decode payload: %w", err)
	}
	tx, err := h.db.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))

	var id uuid.UUID
	err = tx.QueryRow(ctx, `INSERT INTO processed_event (event_id, processed_at) VALUES ($1, now())
		ON CONFLICT (event_id) DO NOTHING RETURNING event_id`, env.EventID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // already processed: ack without effect
	}
	if err != nil {
		return err
	}
	for _, l := range order.Lines {
		// A time-ordered (v7) id, as the shop's handler makes them.
		if _, err := tx.Exec(ctx, `INSERT INTO reservation (id, order_id, product_id, quantity, created_at)
			VALUES ($1, $2, $3, $4::numeric, now())`, uuid.Must(uuid.NewV7()), order.OrderID, l.ProductID, l.Quantity); err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}
