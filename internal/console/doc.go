// Package console is platformd's web console for operators: server-rendered
// pages over the same admin.Backend the gRPC API calls, so both see one
// source of truth and enforce the same roles.
//
// Pages: an overview of every service and pool (horizons, last purge,
// outbox, pool states, counters and a processed/s chart of the last 15
// minutes sampled by the console itself), a pool page (pause and resume, its
// failed messages and their retry), a service page (horizon, purge with a
// dry run first, purge history), the failure workbench of a service (its
// failure store's rows grouped by reason, handler, event name, fingerprint
// or pool; a group's failures a page at a time; a failure's fields,
// headers, bodies and edits; retries with a canary after a dry run,
// followed until done; discards with a reason; payload edits), replays,
// an event lookup across services, and the audit list. A failure's body is
// the sender's: it is only ever shown as escaped text. Figures refresh by polling HTML fragments with htmx; every form
// works without script too.
//
// Security: an operator signs in with one of the admin API's tokens
// (compared in constant time); the server keeps the session (random id,
// absolute expiry) and hands the browser an HttpOnly, SameSite=Strict
// cookie, Secure when TLS is on. Every state-changing request needs an
// admin session and the session's CSRF token, and is refused when its
// Origin or Sec-Fetch-Site says it came from another site. A read session
// sees everything and changes nothing (403). Failed sign-ins are logged
// without the token and slowed down per client address (exponential
// backoff, answered 429 meanwhile). Without a session every page
// redirects a browser to /login and answers 401 to anything else; only
// /login and the static assets are reachable anonymously.
//
// Everything is embedded: the templates, the stylesheet and a vendored
// htmx 2.0.11 (static/htmx-2.0.11.min.js, dist/htmx.min.js of the npm
// package htmx.org@2.0.11, licence beside it; its SHA-256 is pinned by a
// test). No CDN, no external font: the console works offline. The Content
// Security Policy allows only the console's own scripts and styles.
package console
