package main

// This file prints the run's report: what was provoked, what platformd
// counted, and what the databases hold, at a glance.

import (
	"fmt"
	"strings"
	"time"
)

// report prints what happened and what the databases hold, at a glance.
func (dm *demo) report(c counters, v verdict) {
	pl := dm.plan
	w := dm.out
	p := func(label, format string, args ...any) {
		_, _ = fmt.Fprintf(w, "%-27s"+format+"\n", append([]any{label + ":"}, args...)...)
	}
	_, _ = fmt.Fprintln(w)
	p("events published", "%d (%d orders, %d status changes) by order, %d stock.stock.reserved.v1 by stock", len(pl.events),
		len(pl.stockIDs), len(pl.shippingIDs), len(pl.orders))
	kill := "no SIGKILL"
	if n := len(dm.killedAfter); n > 0 {
		what := "SIGKILL"
		if dm.proxy != nil {
			what = "connection loss + SIGKILL"
		}
		kill = what
		if n > 1 {
			kill = fmt.Sprintf("%d x %s", n, what)
		}
	}
	dups := int(c.outcome[outDuplicate])
	p("duplicates provoked", "%s, %s, replayed %d", dm.republishText(), kill, len(pl.replay))
	// Each event was processed once (checked below); every other delivery
	// platformd settled was a duplicate it skipped.
	runs := "1 platformd run"
	if dm.runs > 1 {
		runs = fmt.Sprintf("%d platformd runs", dm.runs)
	}
	deliveries := len(pl.events) + len(pl.orders) + dups
	if dm.billing != nil {
		deliveries += len(pl.stockIDs) // billing's copy of each order.order.placed.v1
	}
	p("deliveries (with copies)", "%d over %s", deliveries, runs)
	p("duplicates skipped", "%-4d (relay republish %d, broker redelivery %d, replay %d)", dups,
		int(c.source[srcRepublish]), int(c.source[srcRedelivery]), int(c.source[srcReplay]))
	if n := c.outcome[outRetried] + c.outcome[outFailed] + c.outcome[outRejected]; n > 0 {
		p("retried/failed/rejected", "%d/%d/%d", int(c.outcome[outRetried]), int(c.outcome[outFailed]), int(c.outcome[outRejected]))
	}
	p("reservations created", "%d (expected %d)", v.reservations, pl.lines)
	p("parcels prepared", "%d (expected %d), from stock.stock.reserved.v1 relayed from stock's outbox", v.parcels, len(pl.orders))
	p("rolled-back orders", "%d written then rolled back, none delivered", len(dm.writer.rolledBackOrders))
	p("order statuses", "%d at their latest version (expected %d)", v.latest, len(pl.orders))
	p("processed_event rows", "stock %d, shipping %d (expected %d, %d)", v.rows[0], v.rows[1], len(pl.stockIDs), len(pl.shippingIDs))
	if dm.billing != nil {
		p("invoices (billing, PHP)", "%d (expected %d), by a remote handler; billing processed_event rows %d", v.invoices, len(pl.orders), v.billingRows)
	}
	if len(v.problems) == 0 {
		p("exactly once", "OK")
	} else {
		p("exactly once", "FAILED (see below)")
	}
	foot := fmt.Sprintf("Duplicates are platformd's own counters, summed over its runs. The other lines are read "+
		"from the databases, for this run's %d events only.", len(pl.events))
	if dm.leftover > 0 {
		foot += fmt.Sprintf(" The counters include the %d messages an earlier run left queued.", dm.leftover)
	}
	if dm.approx {
		foot += " The counters of a SIGKILLed run miss what it settled after the demo last read them: " +
			"the duplicate counts are a little low."
	}
	foot += fmt.Sprintf(" Took %s.", time.Since(dm.started).Round(100*time.Millisecond))
	_, _ = fmt.Fprintf(w, "\n%s\n", wrap(foot, 92))
}

// republishText describes the simulated relay crashes for the report.
func (dm *demo) republishText() string {
	if len(dm.republished) == 0 {
		return "no relay crash"
	}
	rows := 0
	for _, n := range dm.republished {
		rows += n
	}
	return fmt.Sprintf("%d x relay crash simulated (%d published rows written back)", len(dm.republished), rows)
}

// wrap breaks text into lines of at most width bytes, between words.
func wrap(text string, width int) string {
	var b strings.Builder
	n := 0
	for _, word := range strings.Fields(text) {
		switch {
		case n == 0:
		case n+1+len(word) > width:
			b.WriteByte('\n')
			n = 0
		default:
			b.WriteByte(' ')
			n++
		}
		b.WriteString(word)
		n += len(word)
	}
	return b.String()
}
