package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// runRaw is the raw contender: consume and ack, no decoding and no
// database, with a large prefetch and multiple-acks, to show the broker's
// own limit on this machine. It prints "DONE <unix ns>" once it has acked
// -expect messages, and with -latency-file writes one "<occurred_at ns>
// <ack ns>" line per message on exit.
func runRaw(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("raw", flag.ExitOnError)
	amqpURL := fs.String("amqp", "", "AMQP URL")
	queue := fs.String("queue", "", "queue")
	consumers := fs.Int("consumers", 2, "channels consuming in parallel")
	prefetch := fs.Int("prefetch", 2000, "prefetch per channel")
	ackEvery := fs.Int("ack-every", 250, "multiple-ack after this many deliveries (or when none is waiting)")
	expect := fs.Int("expect", 0, "print DONE after this many acks")
	latencyFile := fs.String("latency-file", "", "record publish-to-ack times here")
	_ = fs.Parse(args)

	conn, _, closeAll, err := roleConnect(ctx, "bench-raw", *amqpURL, "", 0)
	if err != nil {
		return err
	}
	defer closeAll()
	done := &doneCounter{expect: int64(*expect)}
	record := *latencyFile != ""
	samples := make([][][2]int64, *consumers)
	err = consumeAll(ctx, conn, *queue, *consumers, *prefetch, func(k int, ch *amqp.Channel, deliveries <-chan amqp.Delivery) error {
		var pending int
		var last uint64
		var occurred []int64
		ack := func() error {
			if pending == 0 {
				return nil
			}
			if err := ch.Ack(last, true); err != nil {
				return err
			}
			now := time.Now().UnixNano()
			for _, o := range occurred {
				samples[k] = append(samples[k], [2]int64{o, now})
			}
			occurred = occurred[:0]
			done.add(pending, now)
			pending = 0
			return nil
		}
		for {
			var d amqp.Delivery
			var ok bool
			select {
			case d, ok = <-deliveries:
			default:
				// Nothing waiting: settle what we hold before blocking.
				if err := ack(); err != nil {
					return err
				}
				select {
				case d, ok = <-deliveries:
				case <-ctx.Done():
					return nil
				}
			}
			if !ok {
				return errors.New("raw: deliveries closed")
			}
			pending++
			last = d.DeliveryTag
			if record {
				occurred = append(occurred, occurredAt(d.Body))
			}
			if pending >= *ackEvery {
				if err := ack(); err != nil {
					return err
				}
			}
		}
	})
	if record {
		if werr := writeSamples(*latencyFile, samples); werr != nil {
			return errors.Join(err, werr)
		}
	}
	return err
}

// occurredAt extracts occurred_at from an envelope body without decoding
// it (the raw contender does no JSON work); 0 if absent.
func occurredAt(body []byte) int64 {
	const key = `"occurred_at":"`
	i := bytes.Index(body, []byte(key))
	if i < 0 {
		return 0
	}
	rest := body[i+len(key):]
	j := bytes.IndexByte(rest, '"')
	if j < 0 {
		return 0
	}
	t, err := time.Parse(time.RFC3339Nano, string(rest[:j]))
	if err != nil {
		return 0
	}
	return t.UnixNano()
}

func writeSamples(path string, samples [][][2]int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	for _, s := range samples {
		for _, p := range s {
			fmt.Fprintf(w, "%d %d\n", p[0], p[1])
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// consumeOn opens a channel on conn with the given prefetch and consumes
// queue on it with manual acks.
func consumeOn(conn *amqp.Connection, queue string, prefetch int) (*amqp.Channel, <-chan amqp.Delivery, error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, nil, err
	}
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return nil, nil, err
	}
	deliveries, err := ch.Consume(queue, "", false, false, false, false, nil)
	if err != nil {
		return nil, nil, err
	}
	return ch, deliveries, nil
}
