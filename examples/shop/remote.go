package shop

import (
	"encoding/json"
	"net/http"
)

// RemoteReserveStatement is the stock reservation as a remote handler's
// one named statement per event (its name: "reserve"): the order's lines
// come as a JSON array arg. The bench and internal/remote's benchmark
// measure platformd's cost of a remote handler with it.
const RemoteReserveStatement = `INSERT INTO reservation (id, order_id, product_id, quantity, created_at)
SELECT gen_random_uuid(), @order_id::uuid, (l->>'product_id')::uuid, (l->>'quantity')::numeric(12,3), now()
FROM jsonb_array_elements(@lines::jsonb) AS l`

// RemoteReserveHandler answers a remote handler call (docs/remote-handlers.md)
// for order placed events with RemoteReserveStatement's effect
// per event: a small Go service standing in for one in any language. Safe
// for concurrent use.
func RemoteReserveHandler() http.Handler {
	type reserveArgs struct {
		OrderID string          `json:"order_id"`
		Lines   json.RawMessage `json:"lines"`
	}
	type effect struct {
		Statement string      `json:"statement"`
		Args      reserveArgs `json:"args"`
	}
	type result struct {
		EventID string   `json:"event_id"`
		Effects []effect `json:"effects"`
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Events []struct {
				EventID string      `json:"event_id"`
				Payload reserveArgs `json:"payload"`
			} `json:"events"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		out := struct {
			Results []result `json:"results"`
		}{Results: make([]result, len(req.Events))}
		for i, ev := range req.Events {
			out.Results[i] = result{EventID: ev.EventID, Effects: []effect{{Statement: "reserve", Args: ev.Payload}}}
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(out)
	})
}
