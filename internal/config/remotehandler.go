package config

import (
	"crypto/tls"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"
)

// RemoteTimeoutDefault is a remote handler's timeout when none is set.
const RemoteTimeoutDefault = 5 * time.Second

// remoteTimeoutMax bounds a remote handler's timeout: the batch's
// transaction stays open while the handler computes.
const remoteTimeoutMax = 5 * time.Minute

// RemoteHandlerConfig is a handler served over HTTP by a process of the
// service's own, in any language (services[].remote_handlers[], see
// docs/remote-handlers.md): platformd POSTs it a batch's new events and applies
// the effects it answers, by name from Statements, in the batch's
// transaction.
type RemoteHandlerConfig struct {
	// Name is the handler's name (^[a-z0-9][a-z0-9_.-]*$), in one
	// namespace with Go and SQL handlers.
	Name string `yaml:"name"`
	// Events are the event names the handler handles (at least one).
	Events []string `yaml:"events"`
	// URL is the http or https URL POSTed to.
	URL string `yaml:"url"`
	// Timeout bounds each call (default RemoteTimeoutDefault, at most 5m).
	Timeout time.Duration `yaml:"timeout"`
	// Headers are sent with every call (${VAR} expanded, like every
	// string of the config but statements).
	Headers map[string]string `yaml:"headers"`
	// TLS holds optional CA and client certificate files (a client
	// certificate makes the call mTLS); relative paths are resolved
	// against the config's directory by Load.
	TLS RemoteTLSConfig `yaml:"tls"`
	// Statements are the only SQL the handler may ask for, by name (at
	// least one); taken as written, like SQL handlers' statements.
	Statements map[string]SQLStatement `yaml:"statements"`
	// MaxInFlight, when positive, bounds the calls at once to the handler
	// in one daemon, across every pool running it (default 0: none).
	MaxInFlight int `yaml:"max_in_flight"`
	// Concurrency is "" (calls as the pools run them, up to MaxInFlight)
	// or RemoteConcurrencyAdaptive: the bound follows the handler's
	// answers, shrinking on 429, 503 and rising latency.
	Concurrency string `yaml:"concurrency"`

	// keyPath is "services[i].remote_handlers[j]", set by validation.
	keyPath string
}

// RemoteTLSConfig holds a remote handler's TLS files.
type RemoteTLSConfig struct {
	// CAFile is a PEM bundle of the CAs trusted for the handler's
	// certificate (default: the system's).
	CAFile string `yaml:"ca_file"`
	// CertFile is the PEM client certificate (with KeyFile, or neither).
	CertFile string `yaml:"cert_file"`
	// KeyFile is the PEM private key of CertFile.
	KeyFile string `yaml:"key_file"`
}

// KeyPath returns the handler's key path in the config, e.g.
// "services[0].remote_handlers[1]".
func (h RemoteHandlerConfig) KeyPath() string { return h.keyPath }

// StatementNames returns the names of the handler's statements, sorted.
func (h RemoteHandlerConfig) StatementNames() []string {
	names := make([]string, 0, len(h.Statements))
	for n := range h.Statements {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// RemoteSQLChecker is implemented by a HandlerCatalog that can also check
// remote handlers' statements (the daemon's does, with package
// sqlhandler's ParseRemote). Load then reports each statement it refuses
// at its key path, e.g. "services[0].remote_handlers[0].statements.open".
type RemoteSQLChecker interface {
	// CheckRemoteSQL returns why statement cannot be a remote handler's
	// statement, or nil.
	CheckRemoteSQL(statement string) error
}

// statementNameRE is the rule for a remote handler's statement names,
// which its answers quote.
var statementNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]*$`)

// headerNameRE is an HTTP field name (RFC 9110 token).
var headerNameRE = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// reservedHeaders are set by platformd on every call.
var reservedHeaders = []string{"Content-Type", "Content-Length", "Host", "Transfer-Encoding", "Connection", "Traceparent", "Tracestate"}

// remoteHandler checks one remote handler and records it in refs.
func (v *validator) remoteHandler(i int, h *RemoteHandlerConfig, refs map[string]sqlHandlerRef) {
	hp := h.keyPath
	nameOK := v.handlerName(hp, h.Name, refs)
	events := v.handlerEvents(hp, h.Events)
	v.remoteLimits(hp, h) // limits.go

	switch u, err := url.Parse(h.URL); {
	case h.URL == "":
		v.ps.add(hp+".url", "must not be empty: the http or https URL platformd POSTs the events to")
	case err != nil:
		v.ps.add(hp+".url", "invalid URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		v.ps.add(hp+".url", "invalid URL %q: the scheme must be http or https", h.URL)
	case u.Host == "" || u.Hostname() == "":
		v.ps.add(hp+".url", "invalid URL %q: no host", h.URL)
	case u.User != nil:
		v.ps.add(hp+".url", "must not hold credentials: put them in headers (e.g. Authorization)")
	case u.Fragment != "":
		v.ps.add(hp+".url", "invalid URL %q: a fragment is never sent", h.URL)
	case u.Scheme == "http" && (h.TLS != RemoteTLSConfig{}):
		v.ps.add(hp+".tls", "set, but url %q is not https", h.URL)
	}

	switch {
	case !v.isSet(hp + ".timeout"):
		h.Timeout = RemoteTimeoutDefault
	case h.Timeout <= 0:
		v.ps.add(hp+".timeout", "must be positive (default %s)", RemoteTimeoutDefault)
	case h.Timeout > remoteTimeoutMax:
		v.ps.add(hp+".timeout", "at most %s: the batch's transaction stays open during the call", remoteTimeoutMax)
	}

	for _, name := range slices.Sorted(maps.Keys(h.Headers)) {
		p := hp + ".headers." + name
		switch {
		case !headerNameRE.MatchString(name):
			v.ps.add(p, "invalid header name %q", name)
		case slices.Contains(reservedHeaders, http.CanonicalHeaderKey(name)):
			v.ps.add(p, "header %s is set by platformd", http.CanonicalHeaderKey(name))
		case strings.ContainsAny(h.Headers[name], "\r\n\x00"):
			v.ps.add(p, "a header value must not hold CR, LF or NUL")
		}
	}

	v.remoteTLS(hp+".tls", &h.TLS)

	if len(h.Statements) == 0 {
		v.ps.add(hp+".statements", "at least one statement is required: the effects the handler may ask for, by name")
	}
	checker, _ := v.handlers.(RemoteSQLChecker)
	for _, name := range h.StatementNames() {
		sp := hp + ".statements." + name
		stmt := string(h.Statements[name])
		switch {
		case !statementNameRE.MatchString(name):
			v.ps.add(sp, "invalid statement name %q: must match %s", name, statementNameRE)
		case strings.TrimSpace(stmt) == "":
			v.ps.add(sp, "empty statement")
		case checker != nil:
			if err := checker.CheckRemoteSQL(stmt); err != nil {
				v.ps.add(sp, "%v", err)
			}
		}
	}
	if nameOK {
		refs[h.Name] = sqlHandlerRef{service: i, path: hp, events: events}
	}
}

// remoteTLS resolves and checks a remote handler's TLS files.
func (v *validator) remoteTLS(p string, t *RemoteTLSConfig) {
	for _, f := range []struct {
		key string
		v   *string
	}{{"ca_file", &t.CAFile}, {"cert_file", &t.CertFile}, {"key_file", &t.KeyFile}} {
		if *f.v == "" {
			if v.isSet(p + "." + f.key) {
				v.ps.add(p+"."+f.key, "must not be empty (omit the key for none)")
			}
			continue
		}
		*f.v = v.resolvePath(*f.v)
		if msg := checkFile(*f.v); msg != "" {
			v.ps.add(p+"."+f.key, "%s", msg)
			*f.v = ""
		}
	}
	switch {
	case (t.CertFile == "") != (t.KeyFile == ""):
		if !v.ps.badUnder(p) {
			v.ps.add(p, "cert_file and key_file go together (a client certificate for mTLS)")
		}
	case t.CertFile != "":
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			v.ps.add(p+".cert_file", "%v", err)
		}
	}
	if t.CAFile != "" {
		if _, err := LoadCertPool(t.CAFile); err != nil {
			v.ps.add(p+".ca_file", "%v", err)
		}
	}
}

// handlerName checks the name of a config handler (SQL or remote) at hp:
// the registry's rule, unique among the config's handlers and the
// binary's Go handlers. It reports whether the name may be recorded.
func (v *validator) handlerName(hp, name string, refs map[string]sqlHandlerRef) bool {
	switch {
	case name == "":
		v.ps.add(hp+".name", "must not be empty")
	case !handlerNameRE.MatchString(name):
		v.ps.add(hp+".name", "invalid handler name %q: must match %s", name, handlerNameRE)
	default:
		if other, dup := refs[name]; dup {
			v.ps.add(hp+".name", "duplicate handler name %q (also %s)", name, other.path)
			return false
		}
		if v.handlers != nil {
			if _, isGo := v.handlers.HandlerEvents(name); isGo {
				v.ps.add(hp+".name", "handler name %q is taken by a Go handler of this binary (Go, SQL and remote handlers share one namespace)", name)
				return false
			}
		}
		return true
	}
	return false
}

// handlerEvents checks a config handler's event list and returns the
// valid names.
func (v *validator) handlerEvents(hp string, list []string) []string {
	var events []string
	if len(list) == 0 {
		v.ps.add(hp+".events", "at least one event name is required")
	}
	seen := map[string]int{}
	for k, ev := range list {
		ep := fmt.Sprintf("%s.events[%d]", hp, k)
		if msg := checkEventName(ev); msg != "" {
			v.ps.add(ep, "%s", msg)
			continue
		}
		if first, dup := seen[ev]; dup {
			v.ps.add(ep, "duplicate event %q (also events[%d])", ev, first)
			continue
		}
		seen[ev] = k
		events = append(events, ev)
	}
	return events
}
