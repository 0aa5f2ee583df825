package remote_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/platformd/platformd/consumer"
	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/metrics"
	"github.com/platformd/platformd/internal/remote"
)

// A handler that does not answer (refused, overloaded, past its timeout):
// the batch's outcome is an error (requeue, no attempt counted), nothing
// is applied, and the next batch after it answers again is applied once.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name   string
		status int
		result string
	}{
		{"Status429", http.StatusTooManyRequests, metrics.RemoteUnavailable},
		{"Status502", http.StatusBadGateway, metrics.RemoteUnavailable},
		{"Status503", http.StatusServiceUnavailable, metrics.RemoteUnavailable},
		{"Status504", http.StatusGatewayTimeout, metrics.RemoteUnavailable},
		{"Hang", 0, metrics.RemoteTimeout},
		{"Refused", -1, metrics.RemoteUnavailable},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			release := make(chan struct{})
			down := true
			b.answer = func(w http.ResponseWriter, c call) {
				b.mu.Lock()
				isDown := down
				b.mu.Unlock()
				switch {
				case !isDown:
					b.answerAll(w, c)
				case tt.status > 0:
					http.Error(w, "later", tt.status)
				default:
					<-release // hangs past the timeout
				}
			}
			url := b.srv.URL
			if tt.status < 0 {
				l, err := net.Listen("tcp", "127.0.0.1:0")
				require.NoError(t, err)
				url = "http://" + l.Addr().String()
				require.NoError(t, l.Close()) // nothing listens there now
			}
			m := metrics.New()
			h := b.handler(func(c *remote.Config) { c.URL = url; c.Timeout = 300 * time.Millisecond })
			h.Instrument(m, nil)
			p := b.processor(dedup.Route{Name: h.Name(), Handler: h})
			evs := []consumer.Event{event(`1`), event(`2`)}
			start := time.Now()
			_, err := p.Process(context.Background(), evs)
			close(release)
			require.Error(t, err)
			var u *remote.UnavailableError
			require.ErrorAs(t, err, &u)
			require.Less(t, time.Since(start), 5*time.Second, "bounded by the timeout")
			require.Equal(t, 0, b.count(`SELECT count(*) FROM processed_event`), "nothing applied")
			require.Equal(t, 0, b.count(`SELECT count(*) FROM invoice`))
			require.InDelta(t, 0, testutil.ToFloat64(m.Remote.Up.WithLabelValues("billing", h.Name())), 0)
			require.InDelta(t, 1, testutil.ToFloat64(m.Remote.Calls.WithLabelValues("billing", h.Name(), tt.result)), 0)

			if tt.status < 0 {
				return
			}
			b.mu.Lock()
			down = false
			b.mu.Unlock()
			rs, err := p.Process(context.Background(), evs)
			require.NoError(t, err)
			for _, r := range rs {
				require.Equal(t, dedup.OutcomeProcessed, r.Outcome)
			}
			require.Equal(t, 2, b.count(`SELECT count(*) FROM invoice`))
			require.InDelta(t, 1, testutil.ToFloat64(m.Remote.Up.WithLabelValues("billing", h.Name())), 0)
			require.InDelta(t, 1, testutil.ToFloat64(m.Remote.Calls.WithLabelValues("billing", h.Name(), metrics.RemoteOK)), 0)
		})
	}
}

// The batch's own end (a daemon stopping) ends the call at once: the
// batch ends while its call is in flight (CallStarted), not after a timer
// that may fire before the call was sent.
func TestCallEndsWithTheBatch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	b.answer = func(http.ResponseWriter, call) { <-release }
	defer close(release)
	h := b.handler(func(c *remote.Config) { c.Timeout = time.Minute })
	m := metrics.New()
	h.Instrument(m, nil)
	sig := h.TestSignals()
	sig.CallStarted.Init(t)
	sig.CallEnded.Init(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		_, err := b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(ctx, []consumer.Event{event(`1`)})
		errc <- err
	}()
	require.Equal(t, 1, sig.CallStarted.WaitOrTimeout())
	cancel()
	err := <-errc
	require.ErrorIs(t, err, context.Canceled)
	require.Empty(t, sig.CallEnded.WaitOrTimeout(), "cut by the batch: no result")
	var u *remote.UnavailableError
	require.NotErrorAs(t, err, &u, "the batch's own end is not the handler's")
	for _, r := range []string{metrics.RemoteOK, metrics.RemoteUnavailable, metrics.RemoteTimeout, metrics.RemoteBadAnswer} {
		require.Zero(t, testutil.ToFloat64(m.Remote.Calls.WithLabelValues("billing", h.Name(), r)), "and is not counted as a call (%s)", r)
	}
}

// The call is a CLIENT span under the batch's span, its context on the
// request as traceparent; the outbox rows carry the delivery's context.
func TestTracing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer func() { _ = tp.Shutdown(context.Background()) }()
	tracer := tp.Tracer("test")
	h := b.handler()
	h.Instrument(nil, tracer)
	p := dedup.NewProcessor(b.db, dedup.ProcessorConfig{Routes: map[string][]dedup.Route{placed: {{Name: h.Name(), Handler: h}}}, Tracer: tracer})
	_, delivery := tracer.Start(context.Background(), "process queue", trace.WithSpanKind(trace.SpanKindConsumer))
	ev := event(`1`)
	ev.SpanContext = delivery.SpanContext()
	ev2 := event(`2`)
	ev2.SpanContext = delivery.SpanContext()
	rs, err := p.Process(context.Background(), []consumer.Event{ev, ev2})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome)
	delivery.End()

	var client, batch sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		switch {
		case s.SpanKind() == trace.SpanKindClient:
			client = s
		case s.Name() == dedup.SpanBatch:
			batch = s
		}
	}
	require.NotNil(t, client, "a CLIENT span for the call")
	require.NotNil(t, batch)
	require.Equal(t, batch.SpanContext().TraceID(), client.SpanContext().TraceID(), "under the batch's span")
	tpHeader := b.lastCall().header.Get("traceparent")
	require.Equal(t, "00-"+client.SpanContext().TraceID().String()+"-"+client.SpanContext().SpanID().String()+"-01", tpHeader)
	var headers string
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT headers->>'traceparent' FROM platform.outbox LIMIT 1`).Scan(&headers))
	require.Contains(t, headers, delivery.SpanContext().TraceID().String()+"-"+delivery.SpanContext().SpanID().String(),
		"the outbox row carries the delivery's context")
}

// Connections are kept alive: many calls, few connections.
func TestKeepAlive(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.handler(func(c *remote.Config) { c.MaxConns = 4 })
	p := b.processor(dedup.Route{Name: h.Name(), Handler: h})
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			for range 10 {
				if _, err := p.Process(context.Background(), []consumer.Event{event(`1`)}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		require.NoError(t, <-errs)
	}
	require.Equal(t, 40, b.callCount())
	b.mu.Lock()
	defer b.mu.Unlock()
	conns := map[string]bool{}
	for _, c := range b.calls {
		conns[c.remote] = true
	}
	require.LessOrEqual(t, len(conns), 4, "40 calls over at most the pool's connections")
}

// https with the handler's CA: the call goes over h2; a handler whose
// certificate the CA does not sign is unavailable (a TLS failure), never
// a bad answer.
func TestTLS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	protos := make(chan int, 10)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos <- r.ProtoMajor
		b.srv.Config.Handler.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	h := b.handler(func(c *remote.Config) { c.URL = srv.URL + "/handle"; c.CAFile = ca })
	rs, err := b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(context.Background(), []consumer.Event{event(`1`)})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome, "%v", rs[0].Err)
	require.Equal(t, 2, <-protos, "h2 over TLS")

	// Without the CA, the system's roots do not know the test's certificate.
	h = b.handler(func(c *remote.Config) { c.URL = srv.URL + "/handle" })
	_, err = b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(context.Background(), []consumer.Event{event(`2`)})
	var u *remote.UnavailableError
	require.ErrorAs(t, err, &u)
	require.ErrorContains(t, err, "certificate")
}

// mTLS: a handler that requires a client certificate accepts the one
// cert_file/key_file name, and refuses a call without it (unavailable).
func TestMTLS(t *testing.T) {
	t.Parallel()
	b := setup(t)
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "platformd"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	client, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile, ca := filepath.Join(dir, "client.pem"), filepath.Join(dir, "client.key"), filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))

	clients := x509.NewCertPool()
	clients.AddCert(client)
	srv := httptest.NewUnstartedServer(b.srv.Config.Handler)
	srv.TLS = &tls.Config{ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clients, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600))

	h := b.handler(func(c *remote.Config) {
		c.URL = srv.URL + "/handle"
		c.CAFile, c.CertFile, c.KeyFile = ca, certFile, keyFile
	})
	rs, err := b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(context.Background(), []consumer.Event{event(`1`)})
	require.NoError(t, err)
	require.Equal(t, dedup.OutcomeProcessed, rs[0].Outcome, "%v", rs[0].Err)

	h = b.handler(func(c *remote.Config) { c.URL = srv.URL + "/handle"; c.CAFile = ca })
	_, err = b.processor(dedup.Route{Name: h.Name(), Handler: h}).Process(context.Background(), []consumer.Event{event(`2`)})
	var u *remote.UnavailableError
	require.ErrorAs(t, err, &u, "no client certificate: the handshake fails")
	require.Equal(t, 1, b.count(`SELECT count(*) FROM invoice`))
}
