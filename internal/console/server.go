package console

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/platformd/platformd/internal/admin"
	"github.com/platformd/platformd/internal/listener"
)

// Defaults of Config.
const (
	// SessionTTLDefault is how long a sign-in lasts when Config.SessionTTL
	// is zero.
	SessionTTLDefault = 8 * time.Hour
	// SampleEveryDefault is the sampling period of the processed/s charts
	// when Config.SampleEvery is zero.
	SampleEveryDefault = 5 * time.Second
	// LoginBackoffDefault is how long a client waits after its first failed
	// sign-in when Config.LoginBackoff is zero; each further failure
	// doubles it, up to LoginBackoffMax.
	LoginBackoffDefault = time.Second
	// LoginBackoffMax caps the wait between a client's failed sign-ins.
	LoginBackoffMax = time.Minute
	// StopTimeoutDefault bounds how long Stop waits for requests in flight
	// when Config.StopTimeout is zero.
	StopTimeoutDefault = 10 * time.Second
	// ChartWindow is the span of the processed/s charts.
	ChartWindow = 15 * time.Minute
)

// Config configures a Server.
type Config struct {
	// Listen is the TCP address Start listens on; required.
	Listen string
	// Tokens are the tokens operators sign in with: the admin API's, with
	// the same roles. With none, nobody can sign in.
	Tokens []admin.Token
	// TLS optionally turns on TLS (and mTLS), with the admin API's files.
	TLS admin.TLSConfig
	// SessionTTL is how long a session lasts from sign-in. Default:
	// SessionTTLDefault.
	SessionTTL time.Duration
	// SampleEvery is how often the pools' counters are sampled for the
	// charts. Default: SampleEveryDefault.
	SampleEvery time.Duration
	// LoginBackoff is a client's wait after its first failed sign-in.
	// Default: LoginBackoffDefault.
	LoginBackoff time.Duration
	// StopTimeout bounds how long Stop waits for requests in flight.
	// Default: StopTimeoutDefault.
	StopTimeout time.Duration
}

// Server serves the console. Its lifecycle is startstop's (Start, Stop);
// its methods are safe for concurrent use.
type Server struct {
	tlsConfig   *tls.Config
	stopTimeout time.Duration
	logger      *slog.Logger
	handler     *Handler
	httpServer  *http.Server

	// Lifecycle listens, and gives Stop and Addr.
	*listener.Lifecycle
}

// NewServer validates cfg and returns a Server calling backend. It does
// not listen yet: see Start. A nil logger discards logs.
func NewServer(cfg Config, backend admin.Backend, logger *slog.Logger) (*Server, error) {
	if cfg.Listen == "" {
		return nil, errors.New("console: no listen address")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tlsConfig, err := cfg.TLS.Load()
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	h, err := NewHandler(HandlerConfig{
		Tokens: cfg.Tokens, SecureCookie: tlsConfig != nil,
		SessionTTL: cfg.SessionTTL, SampleEvery: cfg.SampleEvery, LoginBackoff: cfg.LoginBackoff,
	}, backend, logger)
	if err != nil {
		return nil, err
	}
	s := &Server{
		Lifecycle:   listener.New("console", cfg.Listen),
		tlsConfig:   tlsConfig,
		stopTimeout: cmp.Or(cfg.StopTimeout, StopTimeoutDefault),
		logger:      logger,
		handler:     h,
	}
	s.httpServer = &http.Server{
		Handler:           h,
		TLSConfig:         tlsConfig,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A pause waits up to 30 s for in-flight batches to settle.
		WriteTimeout:   60 * time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// Start listens on the configured address and serves in the background,
// sampling the pools' counters, until Stop. ctx bounds only the listen:
// cancelling it later does not stop the server.
func (s *Server) Start(ctx context.Context) error {
	return s.Lifecycle.Start(ctx, func(lis net.Listener) func() {
		runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		var wg sync.WaitGroup
		wg.Go(func() { s.handler.Sample(runCtx) })
		wg.Go(func() {
			var err error
			if s.tlsConfig != nil {
				err = s.httpServer.ServeTLS(lis, "", "")
			} else {
				err = s.httpServer.Serve(lis)
			}
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.logger.ErrorContext(runCtx, "console: server stopped", slog.Any("error", err))
			}
		})
		scheme := "http"
		if s.tlsConfig != nil {
			scheme = "https"
		}
		s.logger.InfoContext(ctx, "console: serving", slog.String("addr", lis.Addr().String()), slog.String("scheme", scheme))
		return func() { s.shutdown(); cancel(); wg.Wait() } //nolint:contextcheck // Stop runs long after Start: its ctx must not bound the shutdown
	})
}

// shutdown stops accepting connections and lets requests in flight finish
// within the stop timeout, then cuts them off. Stop (startstop's, through
// the embedded Lifecycle) calls it once and makes every Stop wait for it;
// Stop is safe before Start and more than once.
func (s *Server) shutdown() {
	ctx, cancel := context.WithTimeout(context.Background(), s.stopTimeout)
	defer cancel()
	if err := s.httpServer.Shutdown(ctx); err != nil {
		s.logger.Warn("console: requests in flight did not finish in time, cutting them off",
			slog.Duration("stop_timeout", s.stopTimeout))
		_ = s.httpServer.Close()
	}
}
