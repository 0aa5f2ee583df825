package exactly

import (
	"testing"
	"time"

	"github.com/google/uuid"
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

// A bad input is quarantined only as one row with everything right; a good
// event in a failure store, a bad input stored twice or in the wrong
// database, state or pool, or missing, is a problem.
func TestQuarantined(t *testing.T) {
	t.Parallel()
	good := uuid.New()
	bad := []Bad{
		{Kind: "ok", Body: []byte("1"), DB: "db", Pool: "p", Reason: "decode", RoutingKey: "rk"},
		{Kind: "secret", Body: []byte("2"), DB: "db", Pool: "p", Reason: "decode", RoutingKey: "rk"},
		{Kind: "missing", Body: []byte("3"), DB: "db", Pool: "p", Reason: "decode", RoutingKey: "rk"},
		{Kind: "twice", Body: []byte("4"), DB: "db", Pool: "p", Reason: "decode", RoutingKey: "rk"},
		{Kind: "elsewhere", Body: []byte("5"), DB: "db", Pool: "p", Reason: "decode", RoutingKey: "rk"},
		{Kind: "resolved", Body: []byte("6"), DB: "db", Pool: "p", Reason: "decode", RoutingKey: "rk"},
		{Kind: "copies", Body: []byte("7"), DB: "db", Pool: "p", Reason: "decode", RoutingKey: "rk"},
	}
	now := time.Now()
	row := func(body, errText string) Failed {
		return Failed{DB: "db", Pool: "p", RoutingKey: "rk", Body: []byte(body), Reason: "decode", Error: errText, State: StateFailed,
			Copies: 1, FirstFailedAt: now, FailedAt: now}
	}
	elsewhere, resolved, copies := row("5", "x"), row("6", "x"), row("7", "x")
	elsewhere.DB = "other"
	resolved.State = "resolved"
	copies.Copies = 3
	goodRow := row(`{"event_id":"`+good.String()+`"}`, "x")
	goodRow.EventID = &good
	r := &Report{}
	Quarantined(r, bad, []Failed{
		row("1", "bad json"),
		row("2", "token hunter2"),
		goodRow,
		row("4", "x"), row("4", "x"),
		elsewhere,
		resolved,
		copies,
	}, map[uuid.UUID]bool{good: true}, []string{"hunter2"})
	require.Equal(t, 3, r.BadQuarantined, "ok, twice (its first row), copies")
	require.Equal(t, 8, r.FailureRows)
	require.Equal(t, 10, r.FailureCopies)
	require.Equal(t, 7, r.FailedRows)
	require.Len(t, r.Problems, 6, r.Problems)
	require.Contains(t, r.Problems, `bad input "secret": its error carries a secret`)
	require.Contains(t, r.Problems, "good event "+good.String()+" in the failure store of db (pool p): reason decode, state failed, error x")
	require.Contains(t, r.Problems, `bad input "twice" stored in more than one row: a copy of a failure adds to its row's copies`)
	require.Contains(t, r.Problems, `bad input "elsewhere" in the failure store of other, want db`)
	require.Contains(t, r.Problems, `bad input "resolved" in state resolved, want failed`)
	require.Contains(t, r.Problems, "bad inputs missing from the failure store: missing")
}
