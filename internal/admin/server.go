package admin

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/debug"
	"strings"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/logging"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/recovery"
	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/selector"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
	"github.com/platformd/platformd/internal/config"
	"github.com/platformd/platformd/internal/listener"
)

// Defaults and limits of the admin server.
const (
	// StopTimeoutDefault is how long Stop waits for in-flight calls when
	// ServerConfig.StopTimeout is zero.
	StopTimeoutDefault = 10 * time.Second
	// MaxRecvMsgSize is the largest request accepted, in bytes; a larger one
	// is refused with codes.ResourceExhausted.
	MaxRecvMsgSize = 1 << 20
)

// ServerConfig configures a Server.
type ServerConfig struct {
	// Listen is the TCP address Start listens on. Default:
	// config.AdminListenDefault.
	Listen string
	// Tokens are the bearer tokens accepted. With none, every call but
	// health checks is refused.
	Tokens []Token
	// TLS optionally turns on TLS, and mTLS.
	TLS TLSConfig
	// StopTimeout bounds how long Stop waits for in-flight calls before
	// cutting them off. Default: StopTimeoutDefault.
	StopTimeout time.Duration
}

// Token is one named bearer token.
type Token struct {
	// Name identifies the token in logs and audit trails; it is not secret.
	Name string
	// Role is RoleRead or RoleAdmin.
	Role string
	// Value is the secret presented as "authorization: Bearer <Value>". It
	// is never logged.
	Value string
}

// TLSConfig holds the optional TLS files of the server, all PEM.
type TLSConfig struct {
	// CertFile and KeyFile are the server's certificate chain and key. Both
	// set turns TLS (1.2 or later) on; both empty serves plaintext.
	CertFile, KeyFile string
	// ClientCAFile, when set, requires every client to present a
	// certificate signed by one of its CAs (mTLS). It needs CertFile.
	ClientCAFile string
}

// Server is the gRPC admin server: AdminService, grpc.health.v1 and server
// reflection, behind the interceptors described in the package doc. Its
// methods are safe for concurrent use.
type Server struct {
	adminv1.UnimplementedAdminServiceServer

	backend     Backend
	logger      *slog.Logger
	stopTimeout time.Duration
	grpcServer  *grpc.Server
	health      *health.Server

	// Lifecycle listens, and gives Stop and Addr.
	*listener.Lifecycle
}

// Compile-time check that Server implements the generated interface.
var _ adminv1.AdminServiceServer = (*Server)(nil)

// NewServer validates cfg and returns a Server that calls backend. It does
// not listen yet: see Start and Serve. A nil logger discards logs.
func NewServer(cfg ServerConfig, backend Backend, logger *slog.Logger) (*Server, error) {
	if backend == nil {
		return nil, errors.New("admin: nil backend")
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := validateTokens(cfg.Tokens); err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	serverOpts := []grpc.ServerOption{grpc.MaxRecvMsgSize(MaxRecvMsgSize)}
	tlsConfig, err := loadTLS(cfg.TLS)
	if err != nil {
		return nil, fmt.Errorf("admin: %w", err)
	}
	if tlsConfig != nil {
		serverOpts = append(serverOpts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}

	s := &Server{
		backend:     backend,
		logger:      logger,
		stopTimeout: cmp.Or(cfg.StopTimeout, StopTimeoutDefault),
		health:      health.NewServer(),
		Lifecycle:   listener.New("admin", cmp.Or(cfg.Listen, config.AdminListenDefault)),
	}

	auth := newAuthenticator(cfg.Tokens)
	needsAuth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return !auth.skip(c.FullMethod())
	})
	notHealth := selector.MatchFunc(func(_ context.Context, c interceptors.CallMeta) bool {
		return !strings.HasPrefix(c.FullMethod(), healthPrefix)
	})
	logOpts := []logging.Option{
		logging.WithLogOnEvents(logging.FinishCall),
		logging.WithFieldsFromContext(func(ctx context.Context) logging.Fields {
			if actor := callActor(ctx); actor != "" {
				return logging.Fields{"actor", actor}
			}
			return logging.Fields{}
		}),
	}
	slogger := interceptorLogger(logger)
	recoveryOpt := recovery.WithRecoveryHandlerContext(s.recoverPanic)
	serverOpts = append(serverOpts,
		grpc.ChainUnaryInterceptor(
			recovery.UnaryServerInterceptor(recoveryOpt),
			unaryCallInfo,
			selector.UnaryServerInterceptor(logging.UnaryServerInterceptor(slogger, logOpts...), notHealth),
			selector.UnaryServerInterceptor(auth.unaryAuth, needsAuth),
		),
		grpc.ChainStreamInterceptor(
			recovery.StreamServerInterceptor(recoveryOpt),
			streamCallInfo,
			selector.StreamServerInterceptor(logging.StreamServerInterceptor(slogger, logOpts...), notHealth),
			selector.StreamServerInterceptor(auth.streamAuth, needsAuth),
		),
	)

	s.grpcServer = grpc.NewServer(serverOpts...)
	adminv1.RegisterAdminServiceServer(s.grpcServer, s)
	grpc_health_v1.RegisterHealthServer(s.grpcServer, s.health)
	reflection.Register(s.grpcServer)
	s.setServing(grpc_health_v1.HealthCheckResponse_NOT_SERVING)
	return s, nil
}

// Start listens on the configured address and serves in the background
// until Stop. ctx bounds only the listen: cancelling it later does not stop
// the server.
func (s *Server) Start(ctx context.Context) error {
	return s.Lifecycle.Start(ctx, func(lis net.Listener) func() {
		done := s.serveInBackground(lis, func(err error) {
			s.logger.ErrorContext(ctx, "admin: server stopped", slog.Any("error", err))
		})
		s.logger.InfoContext(ctx, "admin: serving", slog.String("addr", lis.Addr().String()))
		return func() { s.shutdown(); <-done }
	})
}

// Serve serves on lis, which it closes, until Stop; it returns nil after
// Stop. It is the blocking alternative to Start, for tests and callers that
// make their own listener. Only one of Start and Serve may be called, once.
func (s *Server) Serve(lis net.Listener) error {
	var serveErr error
	var done <-chan struct{}
	err := s.Lifecycle.Serve(lis, func(lis net.Listener) func() {
		done = s.serveInBackground(lis, func(err error) { serveErr = err })
		return func() { s.shutdown(); <-done }
	})
	if err != nil {
		_ = lis.Close()
		return err
	}
	<-done
	return serveErr
}

// serveInBackground marks the server SERVING and serves lis in a goroutine;
// the channel returned is closed when serving ends, after onErr saw its
// error, if any.
func (s *Server) serveInBackground(lis net.Listener, onErr func(error)) <-chan struct{} {
	done := make(chan struct{})
	s.setServing(grpc_health_v1.HealthCheckResponse_SERVING)
	go func() {
		defer close(done)
		if err := s.grpcServer.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
			onErr(fmt.Errorf("admin: error serving: %w", err))
		}
	}()
	return done
}

// shutdown stops the server: health turns NOT_SERVING first, then in-flight
// calls get up to the stop timeout to finish before they are cut off. Stop
// (startstop's, through the embedded Lifecycle) calls it once, and makes
// every Stop wait for it; Stop before Start only refuses a later Start.
func (s *Server) shutdown() {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.grpcServer.GracefulStop()
	}()
	timer := time.NewTimer(s.stopTimeout)
	defer timer.Stop()
	select {
	case <-done:
	case <-timer.C:
		s.logger.Warn("admin: in-flight calls did not finish in time, cutting them off",
			slog.Duration("stop_timeout", s.stopTimeout))
		s.grpcServer.Stop()
		<-done
	}
}

// ServiceHealthName is the grpc.health.v1 service name that reports the
// health of hosted service name.
func ServiceHealthName(name string) string { return "platform.service." + name }

// SetServiceHealth reports hosted service name SERVING (its database
// answers and its pools run) or NOT_SERVING through grpc.health.v1, under
// ServiceHealthName(name); forget (after a reload removed the service)
// reports SERVICE_UNKNOWN. It has no effect once Stop began. Safe for
// concurrent use.
func (s *Server) SetServiceHealth(name string, serving, forget bool) {
	st := grpc_health_v1.HealthCheckResponse_NOT_SERVING
	switch {
	case forget:
		st = grpc_health_v1.HealthCheckResponse_SERVICE_UNKNOWN
	case serving:
		st = grpc_health_v1.HealthCheckResponse_SERVING
	}
	s.health.SetServingStatus(ServiceHealthName(name), st)
}

// setServing sets the health status of the server and of AdminService. It
// has no effect once Stop began.
func (s *Server) setServing(st grpc_health_v1.HealthCheckResponse_ServingStatus) {
	s.health.SetServingStatus("", st)
	s.health.SetServingStatus(adminv1.AdminService_ServiceDesc.ServiceName, st)
}

// recoverPanic is the recovery interceptor's handler: it logs the panic with
// its stack and answers codes.Internal with no detail.
func (s *Server) recoverPanic(ctx context.Context, p any) error {
	method, _ := grpc.Method(ctx)
	s.logger.ErrorContext(ctx, "admin: panic in handler",
		slog.String("method", method),
		slog.String("panic", fmt.Sprint(p)),
		slog.String("stack", string(debug.Stack())))
	return status.Error(codes.Internal, internalMessage)
}

// interceptorLogger adapts logger to go-grpc-middleware's logging.Logger.
func interceptorLogger(logger *slog.Logger) logging.Logger {
	return logging.LoggerFunc(func(ctx context.Context, lvl logging.Level, msg string, fields ...any) {
		logger.Log(ctx, slog.Level(lvl), "admin: "+msg, fields...)
	})
}

// validateTokens checks the configured tokens.
func validateTokens(tokens []Token) error {
	names := make(map[string]bool, len(tokens))
	values := make(map[string]bool, len(tokens))
	for i, t := range tokens {
		switch {
		case t.Name == "":
			return fmt.Errorf("token %d: empty name", i)
		case names[t.Name]:
			return fmt.Errorf("token %q: duplicate name", t.Name)
		case t.Role != RoleRead && t.Role != RoleAdmin:
			return fmt.Errorf("token %q: role %q, want %q or %q", t.Name, t.Role, RoleRead, RoleAdmin)
		case t.Value == "":
			return fmt.Errorf("token %q: empty value", t.Name)
		case strings.ContainsAny(t.Value, " \t\r\n"):
			return fmt.Errorf("token %q: value contains whitespace", t.Name)
		case values[t.Value]:
			return fmt.Errorf("token %q: same value as another token", t.Name)
		}
		names[t.Name] = true
		values[t.Value] = true
	}
	return nil
}

// loadTLS returns the server's TLS configuration, or nil for plaintext.
func loadTLS(cfg TLSConfig) (*tls.Config, error) {
	if cfg.CertFile == "" && cfg.KeyFile == "" {
		if cfg.ClientCAFile != "" {
			return nil, errors.New("tls: client_ca_file needs cert_file and key_file")
		}
		return nil, nil
	}
	if cfg.CertFile == "" || cfg.KeyFile == "" {
		return nil, errors.New("tls: cert_file and key_file must be set together")
	}
	cert, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: error loading key pair: %w", err)
	}
	tlsConfig := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	if cfg.ClientCAFile != "" {
		pool, err := config.LoadCertPool(cfg.ClientCAFile)
		if err != nil {
			return nil, fmt.Errorf("tls: client_ca_file: %w", err)
		}
		tlsConfig.ClientCAs = pool
		tlsConfig.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tlsConfig, nil
}
