package main

// This file provokes the duplicates while the orders are written: what a
// relay crash between the broker's confirm and the rows' delete leaves
// behind (published outbox rows written again, so the relay publishes them
// a second time), and a broker connection lost mid-stream followed by a
// SIGKILL (RabbitMQ redelivers what it never saw acked).

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"time"

	"github.com/google/uuid"
)

// Poll intervals: counters are scraped often because a SIGKILLed process
// takes its counters with it.
const (
	killPoll = 50 * time.Millisecond
	// republishBatch is the outbox rows written again per simulated relay
	// crash: one relay batch (the shop's outbox batch_size).
	republishBatch = 200
)

// produce writes the plan to the order database while the demo simulates
// -relay-crashes relay crashes (it writes back rows the relay already
// published) and SIGKILLs platformd -kills times mid-stream, each time
// right after a scrape of its counters; each time it is started again.
func (dm *demo) produce(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- dm.writer.run(ctx, dm.plan) }()
	var prodDone bool
	total := len(dm.plan.events)
	for k := 1; k <= dm.o.relayCrashes; k++ {
		// Early in the stream, before the kills: a copy's duplicate then
		// reaches platformd as a fresh publish, not as a redelivery.
		threshold := int64(total * k / (2 * (dm.o.relayCrashes + 1)))
		if _, err := dm.pollUntil(ctx, killPoll, func(counters) bool { return dm.writer.committed.Load() >= max(threshold, 1) }, done, &prodDone); err != nil {
			return err
		}
		if err := dm.republish(ctx, int(dm.writer.committed.Load())); err != nil {
			return err
		}
	}
	for k := 1; k <= dm.o.kills; k++ {
		if err := dm.killMidStream(ctx, k, done, &prodDone); err != nil {
			return err
		}
	}
	if !prodDone {
		select {
		case err := <-done:
			if err != nil {
				return fmt.Errorf("producer: %w", err)
			}
		case <-dm.d.exited:
			return dm.d.exitedErr()
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	dm.note("committed %d events with their orders; rolled back %d more orders, whose events must never arrive",
		dm.writer.committed.Load(), len(dm.writer.rolledBackOrders))
	return nil
}

// republish simulates a relay crash between the broker's confirm of a
// batch and the batch's delete: once the relay has published and deleted
// the last republishBatch rows of the first committed events, the demo
// writes the same rows (event_id, event_name, payload) into
// platform.outbox again, as the crashed relay would have left them, and
// the relay publishes them a second time.
func (dm *demo) republish(ctx context.Context, committed int) error {
	evs := dm.plan.events[max(0, committed-republishBatch):committed]
	ids, names, payloads := make([]uuid.UUID, len(evs)), make([]string, len(evs)), make([]string, len(evs))
	for i, ev := range evs {
		ids[i], names[i], payloads[i] = ev.id, ev.name, string(ev.payload)
	}
	// Wait, a bounded poll, until the relay has deleted them all.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var left int
		if err := dm.orderDB.QueryRow(ctx, `SELECT count(*) FROM platform.outbox WHERE event_id = ANY($1)`, ids).Scan(&left); err != nil {
			return fmt.Errorf("relay crash: count the published rows: %w", err)
		}
		if left == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("relay crash: %d of %d outbox rows still unpublished after 30s%s", left, len(ids), dm.d.tail())
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-dm.d.exited:
			return dm.d.exitedErr()
		case <-time.After(killPoll):
		}
	}
	tag, err := dm.orderDB.Exec(ctx, `INSERT INTO platform.outbox (event_id, event_name, payload)
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::jsonb[])`, ids, names, payloads)
	if err != nil {
		return fmt.Errorf("relay crash: write the published rows again: %w", err)
	}
	n := int(tag.RowsAffected())
	dm.republished = append(dm.republished, n)
	dm.note("relay crash simulated: %d outbox rows the relay had published and deleted are written back, "+
		"as a relay SIGKILLed between the broker's confirm and its delete leaves them; it publishes them again", n)
	dm.d.logf("the demo wrote %d already-published rows back into the order outbox (a simulated relay crash)", n)
	return nil
}

// killMidStream is the k-th broker connection loss: once the events
// processed reach k/(kills+1) of the plan, platformd's traffic to the
// broker is dropped (its acks are lost), the demo waits until platformd
// settled what it holds, SIGKILLs it, closes the connections and starts it
// again.
func (dm *demo) killMidStream(ctx context.Context, k int, done <-chan error, prodDone *bool) error {
	total := len(dm.plan.events)
	threshold := float64(total) * float64(k) / float64(dm.o.kills+1)
	last, err := dm.pollUntil(ctx, killPoll, func(c counters) bool {
		return dm.past.outcome[outProcessed]+c.outcome[outProcessed] >= threshold
	}, done, prodDone)
	if err != nil {
		return err
	}
	if dm.proxy != nil {
		dm.note("platformd loses its broker connection mid-stream: it commits what it holds, its acks are lost")
		dm.proxy.freeze() // what platformd sends (its acks) is dropped
		if last, err = dm.settle(ctx, done, prodDone); err != nil {
			return err
		}
	} else {
		// Counters move only once a batch is acked: what is committed
		// and acked between this scrape and the kill is counted nowhere.
		dm.approx = true
	}
	dm.d.kill()
	if dm.proxy != nil {
		// Every connection closes with the acks it held: the broker
		// requeues what it never saw acknowledged, flagged redelivered.
		dm.proxy.cut()
		dm.proxy.heal()
	}
	dm.past = dm.past.add(last)
	rows, err := dm.countRows(ctx)
	if err != nil {
		return err
	}
	committed := rows[0] + rows[1]
	dm.killedAfter = append(dm.killedAfter, committed)
	dm.note("SIGKILL platformd (%d of %d events committed): RabbitMQ requeues every delivery it did not see acked", committed, total)
	dm.d.logf("SIGKILL sent by the demo (its broker traffic was cut first: %t)", dm.proxy != nil)
	dm.note("restarting platformd")
	return dm.startDaemon(ctx, dm.o.keepRunning && k == dm.o.kills, k < dm.o.kills)
}

// settle waits, while the proxy drops platformd's traffic, until platformd
// has settled every delivery it holds (nothing in flight, counters still),
// and returns its counters then: they are this run's final counts. It gives
// up after a few seconds (a worker waiting for a publisher confirm never
// settles) and returns the last scrape, marking the counts approximate.
func (dm *demo) settle(ctx context.Context, done <-chan error, prodDone *bool) (counters, error) {
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	stable, prev := 0, -1.0
	last, err := dm.pollUntil(sctx, killPoll, func(c counters) bool {
		n := c.deliveries()
		if c.inFlight == 0 && n == prev {
			stable++
		} else {
			stable = 0
		}
		prev = n
		return stable >= stableFor
	}, done, prodDone)
	if err != nil && ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
		dm.approx = true
		return dm.lastScrape, nil
	}
	return last, err
}

// setupProxy puts the demo's proxy between platformd and RabbitMQ for the
// runs it kills, if the config takes its broker URL from
// PLATFORMD_AMQP_URL (the shop's does) and the URL is plain amqp. Else
// platformd is simply SIGKILLed and the counts of the killed runs are
// approximate.
func (dm *demo) setupProxy() error {
	const envURL = "PLATFORMD_AMQP_URL"
	u, err := url.Parse(dm.cfg.Broker.URL)
	if err != nil || u.Scheme != "amqp" {
		return nil
	}
	upstream := u.Host
	if u.Port() == "" {
		upstream = net.JoinHostPort(u.Hostname(), "5672")
	}
	p, err := newBrokerProxy(upstream)
	if err != nil {
		return err
	}
	pu := *u
	pu.Host = p.addr()
	// Does the config read the variable? Expand it again with it set.
	old, had := os.LookupEnv(envURL)
	_ = os.Setenv(envURL, pu.String())
	cfg, err := loadConfig(dm.cfgPath)
	if had {
		_ = os.Setenv(envURL, old)
	} else {
		_ = os.Unsetenv(envURL)
	}
	if err != nil || cfg.Broker.URL != pu.String() {
		p.close()
		return nil
	}
	dm.proxy, dm.proxyEnv = p, append(os.Environ(), envURL+"="+pu.String())
	return nil
}
