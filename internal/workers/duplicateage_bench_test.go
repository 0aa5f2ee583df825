package workers

import (
	"testing"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/state"
)

// BenchmarkDuplicatePath measures what noting duplicates' ages adds to the
// settled path of a batch of 100 deliveries with 10% duplicates (the
// bench's -dup 0.1): deciding each settlement (settlementOf), tallying it
// (hold) and counting the ack (countAcked). "before" is the same path
// with ages neither computed nor noted, as it was; "after" is today's.
// It reports ns per message: the difference is the feature's CPU cost.
//
//	go test -run '^$' -bench DuplicatePath -count 5 ./internal/workers/
func BenchmarkDuplicatePath(b *testing.B) {
	const n, dups = 100, 10
	evs := make([]consumer.Event, n)
	ds := make([]amqp.Delivery, n)
	res := make([]dedup.Result, n)
	for i := range n {
		evs[i] = consumer.Event{ID: uuid.Must(uuid.NewV7())}
		res[i] = dedup.Result{Outcome: dedup.OutcomeProcessed}
		if i%(n/dups) == 0 {
			res[i].Outcome = dedup.OutcomeDuplicate
			ds[i].Redelivered = i%20 == 0
		}
	}
	r := testRulesForBench()
	for _, tc := range []struct {
		name string
		ages bool
	}{{"before", false}, {"after", true}} {
		b.Run(tc.name, func(b *testing.B) {
			m := metrics.New()
			c := &counters{m: newPoolMetrics(m, "svc", "p")}
			if tc.ages {
				c.ages, c.agesNoted = state.NewDuplicateAges("p"), make(chan struct{}, 1)
			}
			var t tally
			for b.Loop() {
				t = tally{ages: t.ages[:0]}
				for i := range n {
					s := r.settlementOf(&ds[i], evs[i], res[i])
					if !tc.ages {
						s.age = 0
						if s.outcome == metrics.OutcomeDuplicate {
							// the former tally: counts only
							switch s.source {
							case metrics.SourceRedelivery:
								t.redelivery++
							default:
								t.republish++
							}
							continue
						}
					}
					t.add(s)
				}
				if !tc.ages {
					t.ages = nil
				}
				c.countAcked(t)
				select {
				case <-c.agesNoted: // the flusher's wake-up
				default:
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/msg")
		})
	}
}

func testRulesForBench() rules { return rules{pool: "p", queue: "q"} }
