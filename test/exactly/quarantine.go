package exactly

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Bad is one bad input sent: it must end in its pool's failure queue.
type Bad struct {
	// Kind names it in problems.
	Kind string
	// Body is what was published (it identifies the copy).
	Body []byte
	// Queue is the pool's queue: the copy belongs in Queue + ".failed".
	Queue string
	// Pool is the pool's name (header x-pool).
	Pool string
	// Reason is the failure reason wanted (header x-failure-reason).
	Reason string
	// RoutingKey is what it was published with (x-original-routing-key).
	RoutingKey string
}

// Failed is one message read from a failure queue.
type Failed struct {
	// Queue is the pool's queue (the failure queue without ".failed").
	Queue   string
	Body    []byte
	Headers amqp.Table
}

// Quarantined checks the failure queues' messages (msgs, every one read)
// against bad: each bad input is there, in its pool's failure queue, with
// its reason, pool, routing key, a non-empty x-error carrying no secret,
// an RFC 3339 x-failed-at and an x-attempt; a good event (goods) or an
// unknown message there is a problem. It sets FailureCopies and counts
// BadQuarantined.
func Quarantined(r *Report, bad []Bad, msgs []Failed, goods map[uuid.UUID]bool, secrets []string) {
	r.FailureCopies = len(msgs)
	byBody := map[string]int{}
	for i, b := range bad {
		byBody[string(b.Body)] = i
	}
	seen := make([]int, len(bad))
	for _, m := range msgs {
		i, ok := byBody[string(m.Body)]
		if !ok {
			var w struct {
				EventID string `json:"event_id"`
			}
			_ = json.Unmarshal(m.Body, &w)
			if id, err := uuid.Parse(w.EventID); err == nil && goods[id] {
				r.Problem("good event %s in %s.failed: reason %v, error %v", id, m.Queue, m.Headers["x-failure-reason"], m.Headers["x-error"])
			} else {
				r.Problem("unknown message in %s.failed (%d bytes): reason %v", m.Queue, len(m.Body), m.Headers["x-failure-reason"])
			}
			continue
		}
		b := bad[i]
		seen[i]++
		if p := quarantineProblem(b, m, secrets); p != "" {
			r.Problems = append(r.Problems, p)
		} else if seen[i] == 1 {
			r.BadQuarantined++
		}
	}
	var notFound []string
	for i, b := range bad {
		if seen[i] == 0 {
			notFound = append(notFound, b.Kind)
		}
	}
	slices.Sort(notFound)
	if len(notFound) > 0 {
		r.Problem("bad inputs missing from the failure queues: %s", strings.Join(notFound, ", "))
	}
}

// quarantineProblem is what is wrong with bad input b's copy m, or "".
func quarantineProblem(b Bad, m Failed, secrets []string) string {
	h := m.Headers
	switch {
	case m.Queue != b.Queue:
		return fmt.Sprintf("bad input %q in %s.failed, want %s.failed", b.Kind, m.Queue, b.Queue)
	case h["x-failure-reason"] != b.Reason:
		return fmt.Sprintf("bad input %q quarantined with reason %v (error %v), want %s", b.Kind, h["x-failure-reason"], h["x-error"], b.Reason)
	case h["x-pool"] != b.Pool:
		return fmt.Sprintf("bad input %q: x-pool %v, want %s", b.Kind, h["x-pool"], b.Pool)
	case h["x-original-routing-key"] != b.RoutingKey:
		return fmt.Sprintf("bad input %q: x-original-routing-key %v, want %s", b.Kind, h["x-original-routing-key"], b.RoutingKey)
	}
	errText, _ := h["x-error"].(string)
	at, _ := h["x-failed-at"].(string)
	if errText == "" {
		return fmt.Sprintf("bad input %q: empty x-error", b.Kind)
	}
	if at == "" {
		return fmt.Sprintf("bad input %q: no x-failed-at", b.Kind)
	}
	if _, err := time.Parse(time.RFC3339, at); err != nil {
		return fmt.Sprintf("bad input %q: x-failed-at %q is not RFC 3339", b.Kind, at)
	}
	if _, ok := h["x-attempt"]; !ok {
		return fmt.Sprintf("bad input %q: no x-attempt", b.Kind)
	}
	for _, sec := range secrets {
		if strings.Contains(errText, sec) {
			return fmt.Sprintf("bad input %q: x-error carries a secret", b.Kind)
		}
	}
	return ""
}

// Leftovers reports every queue (but the failure queues) that still holds
// messages once the daemons stopped: left maps a queue to its count.
func Leftovers(r *Report, left map[string]int) {
	for q, n := range left {
		r.Problem("queue %s still holds %d messages after the daemons stopped", q, n)
	}
}
