package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
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

	conn, err := amqp.DialConfig(*amqpURL, amqp.Config{Properties: amqp.Table{"connection_name": "bench-raw"}})
	if err != nil {
		return err
	}
	defer conn.Close()
	var acked atomic.Int64
	var doneOnce sync.Once
	record := *latencyFile != ""
	samples := make([][][2]int64, *consumers)
	var wg sync.WaitGroup
	errs := make([]error, *consumers)
	for k := range *consumers {
		ch, deliveries, err := consumeOn(conn, *queue, *prefetch)
		if err != nil {
			return err
		}
		wg.Go(func() {
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
				if n := acked.Add(int64(pending)); *expect > 0 && n >= int64(*expect) {
					doneOnce.Do(func() { fmt.Printf("DONE %d\n", now) })
				}
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
					if errs[k] = ack(); errs[k] != nil {
						return
					}
					select {
					case d, ok = <-deliveries:
					case <-ctx.Done():
						return
					}
				}
				if !ok {
					errs[k] = errors.New("raw: deliveries closed")
					return
				}
				pending++
				last = d.DeliveryTag
				if record {
					occurred = append(occurred, occurredAt(d.Body))
				}
				if pending >= *ackEvery {
					if errs[k] = ack(); errs[k] != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	if record {
		if err := writeSamples(*latencyFile, samples); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.Join(errs...)
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
