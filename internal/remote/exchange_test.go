package remote_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/remote"
)

func newCheckHandler(t *testing.T, url string) *remote.Handler {
	t.Helper()
	h, err := remote.New(remote.Config{Service: "billing", Name: "billing.open_invoice", URL: url, Statements: statements})
	require.NoError(t, err)
	t.Cleanup(h.Close)
	return h
}

// CheckAnswer lists every problem of an answer, where a call stops at the
// first: platformd try shows them all to the handler's author.
func TestCheckAnswerListsEveryProblem(t *testing.T) {
	t.Parallel()
	h := newCheckHandler(t, "http://127.0.0.1:1/handle")
	ev := consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: placed}
	other := uuid.Must(uuid.NewV7())
	good := `{"results":[{"event_id":"` + ev.ID.String() + `","effects":[{"statement":"note","args":{"note":"x","order_id":"` +
		uuid.NewString() + `"}}],"publish":[{"event_name":"billing.invoice.opened.v1","payload":{}}]}]}`
	require.Empty(t, h.CheckAnswer([]byte(good), []consumer.Event{ev}))
	own := `{"results":[{"event_id":"` + ev.ID.String() + `","error":"quantity must be positive","permanent":true}]}`
	require.Empty(t, h.CheckAnswer([]byte(own), []consumer.Event{ev}), "an event's own error is of the contract's shape")

	bad := `{"results":[{"event_id":"` + ev.ID.String() + `","effects":[` +
		`{"statement":"open_invoce","args":{}},` +
		`{"statement":"open_invoice","args":{"order_id":"x","total":1,"colour":"red"}},` +
		`{"statement":"note","args":{"note":"x","order_id":"y"}}],` +
		`"publish":[{"event_name":"bad name","payload":[]}]},` +
		`{"event_id":"` + other.String() + `","error":"","effects":[{"statement":"note","args":{"note":"x","order_id":"y"}}]}]}`
	require.Equal(t, []string{
		`results[0].effects[0]: unknown statement "open_invoce" (the statements are note, open_invoice)`,
		`results[0].effects[1]: statement open_invoice takes no arg "colour" (its args are order_id, customer_id, total)`,
		`results[0].effects[1]: statement open_invoice needs arg "customer_id"`,
		`results[0].publish[0]: event_name "bad name": dot-separated words of letters, digits, _ and -`,
		`results[0].publish[0]: payload must be a JSON object`,
		`results[1]: event ` + other.String() + ` was not in the call`,
		`results[1]: "error" must be a non-empty string`,
		`results[1]: a result has "error" or effects and publish, not both`,
	}, h.CheckAnswer([]byte(bad), []consumer.Event{ev}))

	require.Equal(t, []string{`no "results" array`}, h.CheckAnswer([]byte(`{}`), []consumer.Event{ev}))
	require.Equal(t, []string{"no result for event " + ev.ID.String()}, h.CheckAnswer([]byte(`{"results":[]}`), []consumer.Event{ev}))
	problems := h.CheckAnswer([]byte(`{"results":[]} trailing`), []consumer.Event{ev})
	require.Len(t, problems, 1)
	require.Contains(t, problems[0], "not the contract's JSON")
}

// WithExchanges hands each call, request and raw answer, to its recorder;
// without it a call records nothing.
func TestWithExchangesRecordsTheCall(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Events []struct {
				EventID string `json:"event_id"`
			} `json:"events"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		_, _ = w.Write([]byte(`{"results": [{"event_id": "` + req.Events[0].EventID + `", "error": "no such customer"}]}`))
	}))
	t.Cleanup(srv.Close)
	h := newCheckHandler(t, srv.URL)
	ev := consumer.Event{ID: uuid.Must(uuid.NewV7()), Name: placed, OccurredAt: time.Now(), Payload: json.RawMessage(`{"a": 1.50}`)}
	var got []remote.Exchange
	ctx := remote.WithExchanges(context.Background(), func(x remote.Exchange) { got = append(got, x) })
	err := h.Handle(ctx, nil, ev) // the answer is an error: nothing to apply, no transaction used
	require.EqualError(t, err, "no such customer")
	require.Len(t, got, 1)
	require.Equal(t, srv.URL, got[0].URL)
	require.Equal(t, http.StatusOK, got[0].Status)
	require.Contains(t, string(got[0].Request), `"payload":{"a": 1.50}`)
	require.Equal(t, `{"results": [{"event_id": "`+ev.ID.String()+`", "error": "no such customer"}]}`, string(got[0].Answer))
	require.NoError(t, got[0].Err)

	require.Error(t, h.Handle(context.Background(), nil, ev))
	require.Len(t, got, 1, "a call outside WithExchanges records nothing")

	srv.Close()
	err = h.Handle(ctx, nil, ev)
	var unavailable *remote.UnavailableError
	require.ErrorAs(t, err, &unavailable)
	require.Len(t, got, 2)
	require.Zero(t, got[1].Status)
	require.ErrorAs(t, got[1].Err, &unavailable)
}
