// Package admin is platformd's gRPC admin server: the
// platform.admin.v1.AdminService handlers, their input validation, and the
// interceptors around them (panic recovery, logging, bearer-token auth).
//
// The handlers translate requests into calls on a Backend, which the daemon
// implements over the dedup, workers and scheduler packages; this package
// knows nothing of PostgreSQL or RabbitMQ. A Backend reports failures with
// the sentinel errors of errors.go (or the failure store's own), which the
// server maps to gRPC codes.
//
// Interceptors run in this order, outermost first:
//
//  1. recovery: a panic is logged with its stack and answered with
//     codes.Internal and no detail;
//  2. logging: one line per call with the method, code, duration and the
//     caller's token name (never the token itself);
//  3. auth: metadata "authorization: Bearer <token>" is checked against the
//     configured tokens in constant time; role "read" may call the lookups
//     and listings, role "admin" everything. grpc.health.v1 is always
//     reachable without a token, server reflection too once tokens are
//     configured. With no token configured every other call is refused.
//
// The caller's token name reaches the handlers through ActorFromContext and
// is passed to the Backend as the actor of audited changes.
package admin
