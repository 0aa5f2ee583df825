package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/internal/metrics"
)

// counters is one scrape of platformd's metrics, summed over the demo's
// pools. Counters start from zero with every platformd process.
type counters struct {
	outcome  map[string]float64 // platformd_messages_total by outcome
	source   map[string]float64 // platformd_duplicates_total by source
	inFlight float64            // platformd_pool_in_flight
}

func (c counters) deliveries() float64 {
	var n float64
	for _, v := range c.outcome {
		n += v
	}
	return n
}

// add returns c + o.
func (c counters) add(o counters) counters {
	r := counters{outcome: map[string]float64{}, source: map[string]float64{}, inFlight: c.inFlight + o.inFlight}
	for _, m := range []map[string]float64{c.outcome, o.outcome} {
		for k, v := range m {
			r.outcome[k] += v
		}
	}
	for _, m := range []map[string]float64{c.source, o.source} {
		for k, v := range m {
			r.source[k] += v
		}
	}
	return r
}

// scraper reads platformd's Prometheus endpoint.
type scraper struct {
	url    string
	pools  map[string]bool
	client *http.Client
}

func newScraper(listen string, pools []string) (*scraper, error) {
	if listen == "" || listen == "-" {
		return nil, errors.New("metrics.listen is disabled in the config: the demo reads platformd's counters there")
	}
	host, port, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("metrics.listen %q: %w", listen, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	s := &scraper{
		url:    "http://" + net.JoinHostPort(host, port) + "/metrics",
		pools:  map[string]bool{},
		client: &http.Client{Timeout: 2 * time.Second},
	}
	for _, p := range pools {
		s.pools[p] = true
	}
	return s, nil
}

func (s *scraper) scrape(ctx context.Context) (counters, error) {
	c := newCounters()
	err := metrics.Scrape(ctx, s.client, s.url, s.add(c))
	return *c, err
}

// collect sums the samples of the scraper's pools in a metrics page.
func (s *scraper) collect(r io.Reader) (counters, error) {
	c := newCounters()
	err := metrics.ParseText(r, s.add(c))
	return *c, err
}

func newCounters() *counters {
	return &counters{outcome: map[string]float64{}, source: map[string]float64{}}
}

// add returns the sample callback that sums the scraper's pools into c.
func (s *scraper) add(c *counters) func(name string, labels map[string]string, v float64) {
	return func(name string, labels map[string]string, v float64) {
		if !s.pools[labels["pool"]] {
			return
		}
		switch name {
		case "platformd_messages_total":
			c.outcome[labels["outcome"]] += v
		case "platformd_duplicates_total":
			c.source[labels["source"]] += v
		case "platformd_pool_in_flight":
			c.inFlight += v
		}
	}
}

// inspector reads queue depths with passive declares, on a channel it
// reopens when the broker closes it (a missing queue closes the channel).
type inspector struct {
	conn *amqp.Connection
	ch   *amqp.Channel
}

// queue returns the messages ready in name and its consumer count; exists
// is false when the queue is not declared.
func (in *inspector) queue(name string) (ready, consumers int, exists bool, err error) {
	if in.ch == nil || in.ch.IsClosed() {
		if in.ch, err = in.conn.Channel(); err != nil {
			return 0, 0, false, fmt.Errorf("inspect queues: %w", err)
		}
	}
	q, err := in.ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			in.ch = nil
			return 0, 0, false, nil
		}
		return 0, 0, false, fmt.Errorf("inspect queue %s: %w", name, err)
	}
	return q.Messages, q.Consumers, true, nil
}

func (in *inspector) close() {
	if in.ch != nil {
		_ = in.ch.Close()
	}
}

// Outcome names, re-exported for brevity.
const (
	outProcessed = metrics.OutcomeProcessed
	outDuplicate = metrics.OutcomeDuplicate
	outRetried   = metrics.OutcomeRetried
	outFailed    = metrics.OutcomeFailed
	outRejected  = metrics.OutcomeRejected
)
