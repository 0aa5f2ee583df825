package failure

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/state"
)

// Bad filters are ErrInvalid naming the field; a filter's text reaches the
// statement only as arguments.
func TestFilterValidation(t *testing.T) {
	t.Parallel()
	s := NewStore(database(t))
	ctx := t.Context()
	now := time.Now()
	for _, c := range []struct {
		f    Filter
		by   []string
		want string
	}{
		{Filter{State: "x"}, nil, `filter.state: "x" is not a state`},
		{Filter{From: now, To: now}, nil, "filter.from:"},
		{Filter{From: now, To: now.Add(-time.Hour)}, nil, "filter.from:"},
		{Filter{}, []string{"reason", "error"}, `group_by: "error" is not a group-by key`},
		{Filter{Pool: "a\x00b"}, nil, "filter.pool: holds a NUL byte"},
	} {
		_, err := s.Groups(ctx, c.f, c.by)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, c.want)
		if c.by == nil {
			_, _, err = s.List(ctx, c.f, 0, "")
			require.ErrorIs(t, err, ErrInvalid)
			require.ErrorContains(t, err, c.want)
			_, err = s.CreateRetry(ctx, RetryRequest{Filter: c.f}, "op")
			require.ErrorIs(t, err, ErrInvalid)
		}
	}

	evil := `'; DROP TABLE platform.failed_event; --`
	w := newWhere().filter(&Filter{Pool: evil, Text: evil, Reason: evil, Handler: evil, EventName: evil, Fingerprint: evil, State: StateFailed})
	require.NotContains(t, w.sql(), "DROP")
	require.Len(t, w.args, 7)
	_, _, err := s.List(ctx, Filter{Pool: evil, Text: evil}, 10, "")
	require.NoError(t, err)
}

// Groups counts by the keys asked (reason by default), largest first,
// with each group's time range and an example of its own.
func TestGroups(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	var ids []uuid.UUID
	for i := range 6 {
		ids = append(ids, insert(t, db, row{Reason: "permanent", Handler: "h1", EventName: "a", FailedAt: t0.Add(time.Duration(i) * time.Minute)}))
	}
	for i := range 3 {
		insert(t, db, row{Reason: "decode", Handler: "h2", EventName: "b", FailedAt: t0.Add(time.Duration(i) * time.Minute)})
	}
	insert(t, db, row{Reason: "permanent", Handler: "h2", EventName: "a", State: StateResolved, FailedAt: t0})

	g, err := s.Groups(ctx, Filter{}, nil)
	require.NoError(t, err)
	require.Len(t, g, 2)
	require.Equal(t, map[string]string{"reason": "permanent"}, g[0].Key)
	require.Equal(t, int64(7), g[0].Count)
	require.Equal(t, int64(3), g[1].Count)
	require.True(t, g[0].FirstFailedAt.Equal(t0), "%s != %s", g[0].FirstFailedAt, t0)
	require.True(t, g[0].LastFailedAt.Equal(t0.Add(5*time.Minute)))
	f, _, err := s.Get(ctx, g[0].ExampleID)
	require.NoError(t, err)
	require.Equal(t, "permanent", f.Reason)

	g, err = s.Groups(ctx, Filter{State: StateFailed}, []string{GroupHandler, GroupEventName})
	require.NoError(t, err)
	require.Len(t, g, 2)
	require.Equal(t, map[string]string{"handler": "h1", "event_name": "a"}, g[0].Key)
	require.Equal(t, int64(6), g[0].Count)
	require.Contains(t, ids, g[0].ExampleID)

	g, err = s.Groups(ctx, Filter{Pool: "nowhere"}, []string{GroupPool})
	require.NoError(t, err)
	require.Empty(t, g)
}

// List pages newest first through an opaque token, every row once; a bad
// token names page_token; text matches error, name and id, with % and _
// taken literally.
func TestListPages(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	at := time.Now().Add(-time.Hour)
	for i := range 250 {
		// Pairs share a failed_at: the id breaks the tie.
		insert(t, db, row{Error: fmt.Sprintf("err %d", i), FailedAt: at.Add(time.Duration(i/2) * time.Second)})
	}
	seen := map[uuid.UUID]bool{}
	var last *Failure
	tok := ""
	pages := 0
	for {
		page, next, err := s.List(ctx, Filter{}, 100, tok)
		require.NoError(t, err)
		pages++
		for i := range page {
			require.False(t, seen[page[i].ID], "row twice")
			seen[page[i].ID] = true
			if last != nil {
				require.True(t, page[i].FailedAt.Before(last.FailedAt) ||
					(page[i].FailedAt.Equal(last.FailedAt) && compareID(page[i].ID, last.ID) < 0), "order")
			}
			last = &page[i]
		}
		if next == "" {
			break
		}
		tok = next
	}
	require.Len(t, seen, 250)
	require.Equal(t, 3, pages)

	page, next, err := s.List(ctx, Filter{}, 0, "")
	require.NoError(t, err)
	require.Len(t, page, ListLimitDefault)
	require.NotEmpty(t, next)
	page, _, err = s.List(ctx, Filter{}, 5000, "")
	require.NoError(t, err)
	require.Len(t, page, 250)

	for _, bad := range []string{"!!", "AAAA", next + "A"} {
		_, _, err = s.List(ctx, Filter{}, 10, bad)
		require.ErrorIs(t, err, ErrInvalid)
		require.ErrorContains(t, err, "page_token")
	}

	pct := insert(t, db, row{Error: "quota at 50% of limit"})
	insert(t, db, row{Error: "quota at 50 of limit"})
	under := insert(t, db, row{EventName: "stock_reserved"})
	insert(t, db, row{EventName: "stockXreserved"})
	page, _, err = s.List(ctx, Filter{Text: "50%"}, 10, "")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{pct}, idsOf(page))
	page, _, err = s.List(ctx, Filter{Text: "K_RES"}, 10, "")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{under}, idsOf(page))
	f, _, err := s.Get(ctx, under)
	require.NoError(t, err)
	page, _, err = s.List(ctx, Filter{Text: strings.ToUpper(f.EventID.String()[19:])}, 10, "")
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{under}, idsOf(page))
	page, _, err = s.List(ctx, Filter{IDs: []uuid.UUID{pct, under}}, 10, "")
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{pct, under}, idsOf(page))
}

func idsOf(fs []Failure) []uuid.UUID {
	out := make([]uuid.UUID, len(fs))
	for i := range fs {
		out[i] = fs[i].ID
	}
	return out
}

func compareID(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) }

func TestGet(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	id := insert(t, db, row{Pool: "orders", EventName: "order.placed", Error: "boom", SequenceKey: "k1",
		Headers: `{"x-attempt": 3, "traceparent": "t"}`})
	f, edits, err := s.Get(ctx, id)
	require.NoError(t, err)
	require.Empty(t, edits)
	require.Equal(t, id, f.ID)
	require.Equal(t, "orders", f.Pool)
	require.Equal(t, "k1", f.SequenceKey)
	require.Equal(t, "boom", f.Error)
	require.Equal(t, "t", f.Headers["traceparent"])
	require.Contains(t, string(f.Body), `"payload":{"n":1}`)
	require.Nil(t, f.EditedBody)
	require.True(t, f.ResolvedAt.IsZero())

	_, _, err = s.Get(ctx, uuid.New())
	require.ErrorIs(t, err, ErrNotFound)
}

func auditOf(t *testing.T, db *pgxpool.Pool, action string) []state.AuditEntry {
	t.Helper()
	all, err := state.ListAudit(context.Background(), db, 1000)
	require.NoError(t, err)
	var out []state.AuditEntry
	for _, e := range all {
		if e.Action == action {
			out = append(out, e)
		}
	}
	return out
}

// Discard refuses an empty filter and a filter matching nothing, and makes
// the operator choose what becomes of parked events behind a head it
// discards.
func TestDiscard(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()

	_, err := s.Discard(ctx, Filter{}, ParkedUnspecified, "why", "op")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "filter: empty: name at least one field")
	_, err = s.Discard(ctx, Filter{Pool: "none"}, ParkedUnspecified, "why", "op")
	require.ErrorIs(t, err, ErrPrecondition)
	require.ErrorContains(t, err, "matches no unresolved failure")

	// Key k: a failed head and two parked events; key j: a head alone.
	head := insert(t, db, row{Pool: "o", SequenceKey: "k"})
	p1 := insert(t, db, row{Pool: "o", SequenceKey: "k", State: StateParked, Reason: ReasonParked})
	p2 := insert(t, db, row{Pool: "o", SequenceKey: "k", State: StateParked, Reason: ReasonParked})
	lone := insert(t, db, row{Pool: "o", SequenceKey: "j"})
	other := insert(t, db, row{Pool: "q", SequenceKey: "k", State: StateParked, Reason: ReasonParked}) // another pool
	done := insert(t, db, row{Pool: "o", State: StateResolved})

	_, err = s.Discard(ctx, Filter{IDs: []uuid.UUID{head, lone}}, ParkedUnspecified, "why", "op")
	require.ErrorIs(t, err, ErrPrecondition)
	require.ErrorContains(t, err, "2 parked events wait")
	require.ErrorContains(t, err, "choose release")
	require.Equal(t, StateFailed, stateOf(t, db, head))

	// Head and its parked events selected together: nothing is left behind.
	n, err := s.Discard(ctx, Filter{IDs: []uuid.UUID{lone, done}}, ParkedUnspecified, "why", "op")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, StateDiscarded, stateOf(t, db, lone))
	require.Equal(t, StateResolved, stateOf(t, db, done))

	n, err = s.Discard(ctx, Filter{IDs: []uuid.UUID{head}}, ParkedDiscard, "bad data", "op")
	require.NoError(t, err)
	require.Equal(t, int64(3), n)
	for _, id := range []uuid.UUID{head, p1, p2} {
		require.Equal(t, StateDiscarded, stateOf(t, db, id))
	}
	require.Equal(t, StateParked, stateOf(t, db, other))
	f, _, err := s.Get(ctx, head)
	require.NoError(t, err)
	require.Equal(t, "op", f.ResolvedBy)
	require.False(t, f.ResolvedAt.IsZero())

	// Release: the parked events are left to the workers.
	head2 := insert(t, db, row{Pool: "o", SequenceKey: "m", State: StateRetrying})
	p3 := insert(t, db, row{Pool: "o", SequenceKey: "m", State: StateParked, Reason: ReasonParked})
	n, err = s.Discard(ctx, Filter{Pool: "o", State: StateRetrying}, ParkedRelease, "", "op")
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
	require.Equal(t, StateDiscarded, stateOf(t, db, head2))
	require.Equal(t, StateParked, stateOf(t, db, p3))

	a := auditOf(t, db, state.AuditFailureDiscard)
	require.Len(t, a, 3)
	require.Equal(t, "o", a[0].Target)
	require.Equal(t, "release", a[0].Detail["parked"])
	require.Equal(t, "discard", a[1].Detail["parked"])
	require.Equal(t, "bad data", a[1].Detail["reason"])
	require.Equal(t, json.Number("3"), a[1].Detail["count"])
	require.Equal(t, "*", a[1].Target)
}

// EditBody replaces the envelope's payload (the rest byte for byte) or
// the whole envelope, keeps the original, records the diff and refuses
// what would change the event's identity.
func TestEditBody(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	eid := uuid.Must(uuid.NewV7())
	orig := []byte(`{"event_id":"` + eid.String() + `",  "occurred_at": "2026-01-01T00:00:00.000Z", "payload": {"qty": -1, "sku": "A"}, "n": 1.50}`)
	id := insert(t, db, row{EventID: eid, Body: orig, Pool: "o"})

	f, err := s.EditBody(ctx, id, []byte(`{"qty": 1, "sku": "A"}`), "fix qty", "alice")
	require.NoError(t, err)
	require.Equal(t, orig, f.Body)
	want := `{"event_id":"` + eid.String() + `",  "occurred_at": "2026-01-01T00:00:00.000Z", "payload": {"qty": 1, "sku": "A"}, "n": 1.50}`
	require.Equal(t, want, string(f.EditedBody))
	require.Equal(t, want, string(f.SendBody()))
	require.Equal(t, "alice", f.EditedBy)

	_, edits, err := s.Get(ctx, id)
	require.NoError(t, err)
	require.Len(t, edits, 1)
	require.Equal(t, orig, edits[0].BodyBefore)
	require.JSONEq(t, `[{"op":"replace","path":"/payload/qty","value":1}]`, string(edits[0].Diff))
	require.Equal(t, "fix qty", edits[0].Reason)

	// The whole envelope; the second edit starts from the first.
	whole := `{"event_id":"` + eid.String() + `","payload":{"qty":2}}`
	f, err = s.EditBody(ctx, id, []byte(whole), "", "bob")
	require.NoError(t, err)
	require.Equal(t, whole, string(f.EditedBody))
	_, edits, err = s.Get(ctx, id)
	require.NoError(t, err)
	require.Len(t, edits, 2)
	require.Equal(t, want, string(edits[1].BodyBefore))

	for _, c := range []struct{ payload, field string }{
		{`[1]`, "payload:"},
		{`{"a":`, "payload:"},
		{`{"a":1} x`, "payload:"},
		{`null`, "payload:"},
		{`{"event_id":"` + uuid.NewString() + `"}`, "payload.event_id"},
		{`{"event_id":7}`, "payload.event_id"},
	} {
		_, err = s.EditBody(ctx, id, []byte(c.payload), "", "bob")
		require.ErrorIs(t, err, ErrInvalid, c.payload)
		require.ErrorContains(t, err, c.field)
	}

	_, err = s.EditBody(ctx, uuid.New(), []byte(`{}`), "", "bob")
	require.ErrorIs(t, err, ErrNotFound)
	closed := insert(t, db, row{State: StateDiscarded})
	_, err = s.EditBody(ctx, closed, []byte(`{}`), "", "bob")
	require.ErrorIs(t, err, ErrPrecondition)

	// A body that never decoded takes a whole envelope only.
	raw := insert(t, db, row{Body: []byte("\x00garbage")})
	_, err = s.EditBody(ctx, raw, []byte(`{"x":1}`), "", "bob")
	require.ErrorIs(t, err, ErrInvalid)

	a := auditOf(t, db, state.AuditFailureEdit)
	require.Len(t, a, 2)
	require.Equal(t, "o", a[1].Target)
	require.Equal(t, id.String(), a[1].Detail["failure"])
	require.NotEmpty(t, a[1].Detail["diff"])
}

// The payload member is replaced where it is, or added at the end.
func TestReplaceMember(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ doc, want string }{
		{`{"a":1,"payload":{"x":1},"b":"}"}`, `{"a":1,"payload":{"y":2},"b":"}"}`},
		{`{ "payload" :  [1, 2] }`, `{ "payload" :  {"y":2} }`},
		{`{"payload": "payload"}`, `{"payload": {"y":2}}`},
		{`{"a":{"payload":1}}`, `{"a":{"payload":1},"payload":{"y":2}}`},
		{`{}`, `{"payload":{"y":2}}`},
		{`{"a":1 }`, `{"a":1,"payload":{"y":2}}`},
	} {
		got, err := replaceMember([]byte(c.doc), "payload", []byte(`{"y":2}`))
		require.NoError(t, err)
		require.Equal(t, c.want, string(got), c.doc)
	}
	_, err := replaceMember([]byte(`[1]`), "payload", []byte(`1`))
	require.Error(t, err)
}

// PurgeClosed deletes closed rows past their age, in batches, and no other.
func TestPurgeClosed(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	var old []uuid.UUID
	for i := range 7 {
		st := StateResolved
		if i%2 == 0 {
			st = StateDiscarded
		}
		old = append(old, insert(t, db, row{State: st}))
	}
	_, err := db.Exec(ctx, `UPDATE platform.failed_event SET updated_at = now() - interval '2 hours' WHERE id = ANY($1)`, old)
	require.NoError(t, err)
	young := insert(t, db, row{State: StateResolved})
	open := insert(t, db, row{State: StateFailed})
	_, err = db.Exec(ctx, `UPDATE platform.failed_event SET updated_at = now() - interval '2 hours' WHERE id = $1`, open)
	require.NoError(t, err)
	_, err = s.EditBody(ctx, open, []byte(`{"n":2}`), "", "op")
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE platform.failed_event SET updated_at = now() - interval '2 hours', state = 'resolved' WHERE id = $1`, open)
	require.NoError(t, err) // closed since, with an edit

	n, err := s.PurgeClosed(ctx, time.Hour, 3)
	require.NoError(t, err)
	require.Equal(t, int64(8), n)
	var left int
	require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM platform.failed_event`).Scan(&left))
	require.Equal(t, 1, left)
	require.Equal(t, StateResolved, stateOf(t, db, young))
	n, err = s.PurgeClosed(ctx, time.Hour, 0)
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestCounts(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	insert(t, db, row{Pool: "a", Reason: "decode"})
	insert(t, db, row{Pool: "a", Reason: "decode"})
	insert(t, db, row{Pool: "a", Reason: "decode", State: StateResolved})
	insert(t, db, row{Pool: "b", Reason: "permanent", State: StateDiscarded})
	c, err := s.Counts(ctx)
	require.NoError(t, err)
	require.Equal(t, []Count{
		{Pool: "a", Reason: "decode", State: "failed", N: 2},
		{Pool: "a", Reason: "decode", State: "resolved", N: 1},
		{Pool: "b", Reason: "permanent", State: "discarded", N: 1},
	}, c)
}

// A diff holding escapes (quotes, backslashes) reads back as it was
// stored.
func TestEditDiffWithEscapes(t *testing.T) {
	t.Parallel()
	db := database(t)
	s := NewStore(db)
	ctx := t.Context()
	id := insert(t, db, row{})
	_, err := s.EditBody(ctx, id, []byte(`{"note": "a \"quoted\" \\x00 path C:\\tmp\n"}`), "", "op")
	require.NoError(t, err)
	_, edits, err := s.Get(ctx, id)
	require.NoError(t, err)
	require.Len(t, edits, 1)
	require.JSONEq(t, `[{"op":"remove","path":"/payload/n"},{"op":"add","path":"/payload/note","value":"a \"quoted\" \\x00 path C:\\tmp\n"}]`, string(edits[0].Diff))
}
