package exactly

import (
	"testing"
	"time"

	"github.com/google/uuid"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Every rule the checker holds is broken once: each is counted and named.
func TestReportFindsEveryBreak(t *testing.T) {
	t.Parallel()
	once, twice, lost, wrong, extra, bad := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	r := &Report{Events: 4}
	Tally(r, Ledger[uuid.UUID]{
		What:      "applied",
		Want:      Once([]uuid.UUID{once, twice, lost, wrong}),
		Got:       map[uuid.UUID]Count{once: {Rows: 1}, twice: {Rows: 2}, wrong: {Rows: 1, Sum: 7}, extra: {Rows: 1}, bad: {Rows: 1}},
		Forbidden: map[uuid.UUID]string{bad: "poison"},
	})
	Final(r, "status", map[string]int{"a": 1, "b": 2}, map[string]int{"a": 1, "b": 3, "c": 1})
	CheckRecorded(r, Recorded{DB: "db", Sent: []uuid.UUID{once, lost}, Count: true, Never: map[uuid.UUID]string{bad: "poison"}}, map[uuid.UUID]bool{once: true, bad: true})
	r.Close()
	require.Equal(t, 2, r.Applied, "once: in the ledger and in processed_event")
	require.Equal(t, 1, r.Twice)
	require.Equal(t, 2, r.Lost, "lost: from the ledger and from processed_event")
	require.Equal(t, 2, r.Wrong)
	require.Equal(t, 3, r.Unexpected, "extra, bad, and status c")
	require.False(t, r.OK())
	require.Contains(t, r.Problems, `bad input "poison" was applied (applied `+bad.String()+`)`)
	require.Contains(t, r.Problems, `bad input "poison" (event `+bad.String()+`) has a processed_event row`)

	clean := &Report{}
	Tally(clean, Ledger[uuid.UUID]{What: "applied", Want: Once([]uuid.UUID{once}), Got: map[uuid.UUID]Count{once: {Rows: 1}}})
	clean.Close()
	require.True(t, clean.OK(), clean.Problems)
}

// A bad input is quarantined only with every header right; a good event in
// a failure queue, or a bad input missing, is a problem.
func TestQuarantined(t *testing.T) {
	t.Parallel()
	good := uuid.New()
	bad := []Bad{
		{Kind: "ok", Body: []byte("1"), Queue: "q", Pool: "p", Reason: "decode", RoutingKey: "rk"},
		{Kind: "secret", Body: []byte("2"), Queue: "q", Pool: "p", Reason: "decode", RoutingKey: "rk"},
		{Kind: "missing", Body: []byte("3"), Queue: "q", Pool: "p", Reason: "decode", RoutingKey: "rk"},
	}
	hdr := func(errText string) amqp.Table {
		return amqp.Table{"x-failure-reason": "decode", "x-pool": "p", "x-original-routing-key": "rk", "x-error": errText,
			"x-failed-at": time.Now().UTC().Format(time.RFC3339), "x-attempt": int32(1)}
	}
	r := &Report{}
	Quarantined(r, bad, []Failed{
		{Queue: "q", Body: []byte("1"), Headers: hdr("bad json")},
		{Queue: "q", Body: []byte("2"), Headers: hdr("token hunter2")},
		{Queue: "q", Body: []byte(`{"event_id":"` + good.String() + `"}`), Headers: hdr("x")},
	}, map[uuid.UUID]bool{good: true}, []string{"hunter2"})
	require.Equal(t, 1, r.BadQuarantined)
	require.Equal(t, 3, r.FailureCopies)
	require.Len(t, r.Problems, 3, r.Problems)
	require.Contains(t, r.Problems, "bad inputs missing from the failure queues: missing")
}
