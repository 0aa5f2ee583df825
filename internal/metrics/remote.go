package metrics

import "github.com/prometheus/client_golang/prometheus"

// Results of a remote handler's call (label "result" of
// RemoteMetrics.Calls).
const (
	// RemoteOK: the handler answered 200 with one result per event.
	RemoteOK = "ok"
	// RemoteUnavailable: no answer (connection refused, TLS failure) or
	// 429, 502, 503, 504; the batch is requeued with no attempt counted.
	RemoteUnavailable = "unavailable"
	// RemoteTimeout: no answer within the handler's timeout; as
	// unavailable.
	RemoteTimeout = "timeout"
	// RemoteBadAnswer: any other status, a body not of the contract's
	// shape, or results not one-to-one with the events; the events are
	// retried one per call, their attempts counted.
	RemoteBadAnswer = "bad_answer"
)

// RemoteMetrics are the remote handlers' collectors (names and labels
// are relied on by alert rules and dashboards).
type RemoteMetrics struct {
	// Up is 1 while the handler answers, 0 after a call it did not
	// answer (unavailable or timeout).
	Up *prometheus.GaugeVec
	// Calls counts calls by result (RemoteOK, RemoteUnavailable,
	// RemoteTimeout, RemoteBadAnswer).
	Calls *prometheus.CounterVec
	// CallDuration is the time from sending a call to its answer read.
	CallDuration *prometheus.HistogramVec
}

func newRemoteMetrics(f factory) RemoteMetrics {
	sh := []string{"service", "handler"}
	m := RemoteMetrics{
		Up:           f.gauge("platformd_remote_handler_up", "1 while the remote handler answers, 0 after a call it did not answer.", sh...),
		Calls:        f.counter("platformd_remote_handler_calls_total", "Calls to the remote handler, by result (ok, unavailable, timeout, bad_answer).", "service", "handler", "result"),
		CallDuration: f.histogram("platformd_remote_handler_call_duration_seconds", "Time of one call to the remote handler, request sent to answer read.", []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}, sh...),
	}
	return m
}
