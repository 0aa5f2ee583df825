package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	adminv1 "github.com/platformd/platformd/api/gen/platform/admin/v1"
)

// Token roles.
const (
	// RoleRead may call the lookups and listings.
	RoleRead = "read"
	// RoleAdmin may call every RPC.
	RoleAdmin = "admin"
)

// readMethods are the RPCs a RoleRead token may call.
var readMethods = map[string]bool{
	adminv1.AdminService_ListServices_FullMethodName:       true,
	adminv1.AdminService_ListPools_FullMethodName:          true,
	adminv1.AdminService_ListDelayQueues_FullMethodName:    true,
	adminv1.AdminService_GetPoolLimits_FullMethodName:      true,
	adminv1.AdminService_LookupEvent_FullMethodName:        true,
	adminv1.AdminService_GetHorizon_FullMethodName:         true,
	adminv1.AdminService_AdviseHorizon_FullMethodName:      true,
	adminv1.AdminService_ListPurgeRuns_FullMethodName:      true,
	adminv1.AdminService_ListFailedMessages_FullMethodName: true,
	adminv1.AdminService_DescribeService_FullMethodName:    true,
	adminv1.AdminService_ListAudit_FullMethodName:          true,
	adminv1.AdminService_GetReplay_FullMethodName:          true,
	adminv1.AdminService_ListReplays_FullMethodName:        true,
	adminv1.AdminService_ListFailureGroups_FullMethodName:  true,
	adminv1.AdminService_ListFailedEvents_FullMethodName:   true,
	adminv1.AdminService_GetFailedEvent_FullMethodName:     true,
	adminv1.AdminService_GetFailureRetry_FullMethodName:    true,
	adminv1.AdminService_ListFailureRetries_FullMethodName: true,
}

// Method prefixes of the services reachable without a token.
var (
	healthPrefix     = "/" + grpc_health_v1.Health_ServiceDesc.ServiceName + "/"
	reflectionPrefix = "/grpc.reflection."
)

// authenticator checks bearer tokens. It is safe for concurrent use: it is
// never modified after newAuthenticator.
type authenticator struct {
	tokens []storedToken
}

// storedToken is a configured token, kept as the SHA-256 digest of its value
// so that comparisons take the same time whatever the presented length.
type storedToken struct {
	name   string
	role   string
	digest [sha256.Size]byte
}

// newAuthenticator returns an authenticator for tokens, which must have been
// validated.
func newAuthenticator(tokens []Token) *authenticator {
	a := &authenticator{tokens: make([]storedToken, 0, len(tokens))}
	for _, t := range tokens {
		a.tokens = append(a.tokens, storedToken{name: t.Name, role: t.Role, digest: sha256.Sum256([]byte(t.Value))})
	}
	return a
}

// skip reports whether fullMethod is reachable without a token: health
// always, reflection once at least one token is configured.
func (a *authenticator) skip(fullMethod string) bool {
	if strings.HasPrefix(fullMethod, healthPrefix) {
		return true
	}
	return len(a.tokens) > 0 && strings.HasPrefix(fullMethod, reflectionPrefix)
}

// authorize checks the bearer token in ctx's metadata for fullMethod and
// returns the token's name.
func (a *authenticator) authorize(ctx context.Context, fullMethod string) (string, error) {
	if len(a.tokens) == 0 {
		return "", status.Error(codes.Unauthenticated, "no token is configured on the server")
	}
	presented, err := bearerToken(ctx)
	if err != nil {
		return "", err
	}
	digest := sha256.Sum256([]byte(presented))
	// Compare against every token, without an early exit, so that timing
	// tells nothing of which token matched or how far a guess got.
	match := -1
	for i := range a.tokens {
		eq := subtle.ConstantTimeCompare(digest[:], a.tokens[i].digest[:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 {
		return "", status.Error(codes.Unauthenticated, "invalid token")
	}
	tok := a.tokens[match]
	if tok.role != RoleAdmin && !(tok.role == RoleRead && readMethods[fullMethod]) {
		return tok.name, status.Errorf(codes.PermissionDenied, "token %q (role %s) may not call %s", tok.name, tok.role, fullMethod)
	}
	return tok.name, nil
}

// bearerToken returns the token of the single "authorization: Bearer
// <token>" metadata entry in ctx.
func bearerToken(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	values := md.Get("authorization")
	switch len(values) {
	case 0:
		return "", status.Error(codes.Unauthenticated, "missing authorization metadata")
	case 1:
	default:
		return "", status.Error(codes.Unauthenticated, "more than one authorization metadata entry")
	}
	scheme, token, ok := strings.Cut(values[0], " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || strings.ContainsAny(token, " \t") {
		return "", status.Error(codes.Unauthenticated, `malformed authorization metadata, want "Bearer <token>"`)
	}
	return token, nil
}

// unaryAuth is the auth interceptor for unary calls.
func (a *authenticator) unaryAuth(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	name, err := a.authorize(ctx, info.FullMethod)
	setCallActor(ctx, name)
	if err != nil {
		return nil, err
	}
	return handler(withActor(ctx, name), req)
}

// streamAuth is the auth interceptor for streaming calls.
func (a *authenticator) streamAuth(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := ss.Context()
	name, err := a.authorize(ctx, info.FullMethod)
	setCallActor(ctx, name)
	if err != nil {
		return err
	}
	return handler(srv, &actorStream{ServerStream: ss, ctx: withActor(ctx, name)})
}

// actorStream is a grpc.ServerStream whose context carries the actor.
type actorStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, with the actor.
func (s *actorStream) Context() context.Context { return s.ctx }

// actorKey is the context key of the caller's token name.
type actorKey struct{}

// withActor returns ctx carrying actor.
func withActor(ctx context.Context, actor string) context.Context {
	return context.WithValue(ctx, actorKey{}, actor)
}

// ActorFromContext returns the name of the token that authenticated the
// call ctx belongs to, or "" if none did (health, reflection, or a context
// not from the admin server).
func ActorFromContext(ctx context.Context) string {
	actor, _ := ctx.Value(actorKey{}).(string)
	return actor
}

// callInfo is filled in by the auth interceptor for the logging interceptor,
// which runs outside it and so cannot see the contexts auth derives. It is
// safe for concurrent use.
type callInfo struct {
	actor atomic.Pointer[string]
}

// callInfoKey is the context key of *callInfo.
type callInfoKey struct{}

// callActor returns the actor recorded in ctx's callInfo, or "".
func callActor(ctx context.Context) string {
	if ci, ok := ctx.Value(callInfoKey{}).(*callInfo); ok {
		if p := ci.actor.Load(); p != nil {
			return *p
		}
	}
	return ""
}

// setCallActor records actor in ctx's callInfo, if any.
func setCallActor(ctx context.Context, actor string) {
	if ci, ok := ctx.Value(callInfoKey{}).(*callInfo); ok {
		ci.actor.Store(&actor)
	}
}

// unaryCallInfo puts an empty callInfo in the context of unary calls.
func unaryCallInfo(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	return handler(context.WithValue(ctx, callInfoKey{}, &callInfo{}), req)
}

// streamCallInfo puts an empty callInfo in the context of streaming calls.
func streamCallInfo(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	ctx := context.WithValue(ss.Context(), callInfoKey{}, &callInfo{})
	return handler(srv, &actorStream{ServerStream: ss, ctx: ctx})
}
