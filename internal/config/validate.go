package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	amqp "github.com/rabbitmq/amqp091-go"
)

// BatchSizeMax is the largest batch.size a pool may have (a batch's
// deliveries, and the links of its trace's root span).
const BatchSizeMax = 10_000

// Limits checked by validation.
const (
	tokenMinLen        = 16
	maxBodyBytesMax    = 512 << 20 // RabbitMQ's hard limit on a message
	purgeEveryMin      = time.Second
	purgeBatchSizeMax  = 1_000_000
	concurrencyMax     = 256
	maxUnackedBytesMin = 1 << 20
	maxUnackedBytesMax = 1 << 40
	batchWaitMax       = 10 * time.Second
	retryDelayMin      = 100 * time.Millisecond
	retryDelayMax      = 24 * time.Hour
	amqpNameMax        = 255
	failedQueueSuffix  = ".failed"
	// retryQueueInfix is in every retry delay queue's name: the shared
	// ones (delayQueuePrefix) and those an older version declared per pool
	// (<queue>.retry.<delay>), which a pool drains at start.
	retryQueueInfix = ".retry."
	// delayQueuePrefix starts the shared delay queues' names, and their
	// exchanges'.
	delayQueuePrefix   = "platformd.retry."
	reservedAMQPPrefix = "amq."
)

var (
	serviceNameRE = regexp.MustCompile(`^[a-z][a-z0-9_-]*$`)
	poolNameRE    = regexp.MustCompile(`^[a-z][a-z0-9_.-]*$`)
	hostnameRE    = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*\.?$`)
)

// validator checks a decoded, defaulted Config.
type validator struct {
	c        *Config
	ps       *problems
	isSet    func(string) bool
	handlers HandlerCatalog
	baseDir  string
}

func (v *validator) validate() {
	v.log()
	v.admin()
	v.metrics()
	v.console()
	v.broker()
	v.sqlHandlers() // before services: their pools may reference SQL handlers
	v.services()
	v.databaseBudget()
	v.tracing()
}

func (v *validator) log() {
	oneOf(v.ps, "log.level", v.c.Log.Level, "debug", "info", "warn", "error")
	oneOf(v.ps, "log.format", v.c.Log.Format, "json", "text")
}

func (v *validator) admin() {
	if msg := checkListen(v.c.Admin.Listen); msg != "" {
		v.ps.add("admin.listen", "%s", msg)
	}
	v.tokens()
	v.tls()
}

func (v *validator) tokens() {
	names := map[string]int{}
	values := map[string]int{}
	for i := range v.c.Admin.Tokens {
		t := &v.c.Admin.Tokens[i]
		p := fmt.Sprintf("admin.tokens[%d]", i)
		switch {
		case t.Name == "":
			v.ps.add(p+".name", "must not be empty")
		default:
			if j, dup := names[t.Name]; dup {
				v.ps.add(p+".name", "duplicate token name %q (also admin.tokens[%d])", t.Name, j)
			} else {
				names[t.Name] = i
			}
		}
		oneOf(v.ps, p+".role", t.Role, RoleRead, RoleAdmin)

		if v.ps.badUnder(p+".token") || v.ps.badUnder(p+".token_file") {
			continue // already reported
		}
		// Where the token comes from: its path for problems about it.
		var src string
		switch {
		case t.Token != "" && t.TokenFile != "":
			v.ps.add(p, "set only one of token and token_file")
			continue
		case t.TokenFile != "":
			src = p + ".token_file"
			t.TokenFile = v.resolvePath(t.TokenFile)
			data, err := os.ReadFile(t.TokenFile)
			if err != nil {
				v.ps.add(src, "cannot read token file: %v", err)
				continue
			}
			t.Token = strings.TrimSpace(string(data))
			if t.Token == "" {
				v.ps.add(src, "token file %q is empty", t.TokenFile)
				continue
			}
		case t.Token != "":
			src = p + ".token"
		case v.isSet(p + ".token"):
			v.ps.add(p+".token", "must not be empty")
			continue
		case v.isSet(p + ".token_file"):
			v.ps.add(p+".token_file", "must not be empty")
			continue
		default:
			v.ps.add(p, "one of token and token_file is required")
			continue
		}
		if n := utf8.RuneCountInString(t.Token); n < tokenMinLen {
			v.ps.add(src, "token is too short (%d characters, at least %d required)", n, tokenMinLen)
			continue
		}
		if !printableASCII(t.Token) {
			v.ps.add(src, "token must be printable ASCII without spaces (it is sent in an HTTP/2 header)")
			continue
		}
		if j, dup := values[t.Token]; dup {
			v.ps.add(src, "same token as admin.tokens[%d] (tokens must be unique)", j)
			continue
		}
		values[t.Token] = i
	}
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

func (v *validator) tls() {
	t := &v.c.Admin.TLS
	const p = "admin.tls"
	switch {
	case t.CertFile != "" && t.KeyFile == "":
		v.ps.add(p+".key_file", "required when cert_file is set")
	case t.CertFile == "" && t.KeyFile != "":
		v.ps.add(p+".cert_file", "required when key_file is set")
	}
	if t.ClientCAFile != "" && (t.CertFile == "" || t.KeyFile == "") {
		v.ps.add(p+".client_ca_file", "requires cert_file and key_file (mTLS needs server TLS)")
	}
	ok := true
	for _, f := range []struct {
		path string
		file *string
	}{{p + ".cert_file", &t.CertFile}, {p + ".key_file", &t.KeyFile}, {p + ".client_ca_file", &t.ClientCAFile}} {
		if *f.file == "" {
			continue
		}
		*f.file = v.resolvePath(*f.file)
		if msg := checkFile(*f.file); msg != "" {
			v.ps.add(f.path, "%s", msg)
			ok = false
		}
	}
	if !ok {
		return
	}
	if t.CertFile != "" && t.KeyFile != "" {
		if _, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile); err != nil {
			v.ps.add(p+".cert_file", "invalid certificate or key: %v", err)
		}
	}
	if t.ClientCAFile != "" {
		if _, err := LoadCertPool(t.ClientCAFile); err != nil {
			v.ps.add(p+".client_ca_file", "%v", err)
		}
	}
}

// resolvePath resolves a relative path against the config's directory.
func (v *validator) resolvePath(p string) string {
	if v.baseDir == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(v.baseDir, p)
}

func checkFile(path string) string {
	fi, err := os.Stat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return fmt.Sprintf("file %q does not exist", path)
	case err != nil:
		return err.Error()
	case fi.IsDir():
		return fmt.Sprintf("%q is a directory", path)
	}
	return ""
}

func (v *validator) metrics() {
	l := v.c.Metrics.Listen
	if l == MetricsDisabled {
		return
	}
	if msg := checkListen(l); msg != "" {
		v.ps.add("metrics.listen", "%s (or %q to disable)", msg, MetricsDisabled)
		return
	}
	if l == v.c.Admin.Listen && !strings.HasSuffix(l, ":0") {
		v.ps.add("metrics.listen", "same address as admin.listen")
	}
}

// checkListen returns why addr is not a valid host:port listen address, or
// "". The host may be empty (all interfaces), an IP or a hostname; the port
// is a number (0 picks a free port).
func checkListen(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("invalid address %q: want host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Sprintf("invalid port %q in %q", port, addr)
	}
	if host != "" && net.ParseIP(host) == nil && (len(host) > 253 || !hostnameRE.MatchString(host)) {
		return fmt.Sprintf("invalid host %q in %q", host, addr)
	}
	return ""
}

func (v *validator) broker() {
	b := v.c.Broker
	v.brokerURLs()
	switch {
	case b.Exchange == "":
		v.ps.add("broker.exchange", "must not be empty")
	case len(b.Exchange) > amqpNameMax:
		v.ps.add("broker.exchange", "longer than %d bytes", amqpNameMax)
	case strings.HasPrefix(b.Exchange, delayQueuePrefix):
		v.ps.add("broker.exchange", "invalid exchange %q: the %q prefix is reserved for the retry delay exchanges", b.Exchange, delayQueuePrefix)
	}
	if b.MaxBodyBytes < 1 || b.MaxBodyBytes > maxBodyBytesMax {
		v.ps.add("broker.max_body_bytes", "must be between 1 and %d (got %d)", maxBodyBytesMax, b.MaxBodyBytes)
	}
}

// brokerURLs checks broker.url or broker.urls, whichever is set.
func (v *validator) brokerURLs() {
	b := v.c.Broker
	if !v.isSet("broker.urls") {
		if _, err := amqp.ParseURI(b.URL); err != nil {
			v.ps.add("broker.url", "invalid AMQP URL %q: %s", RedactURL(b.URL), urlErrorText(err))
		}
		return
	}
	if v.isSet("broker.url") {
		v.ps.add("broker.urls", "set broker.url (one node) or broker.urls (a cluster), not both")
	}
	if len(b.URLs) == 0 {
		v.ps.add("broker.urls", "must list at least one AMQP URL")
	}
	seen := map[string]int{}
	vhost0 := ""
	for i, u := range b.URLs {
		p := fmt.Sprintf("broker.urls[%d]", i)
		uri, err := amqp.ParseURI(u)
		if err != nil {
			v.ps.add(p, "invalid AMQP URL %q: %s", RedactURL(u), urlErrorText(err))
			continue
		}
		node := fmt.Sprintf("%s:%d", uri.Host, uri.Port)
		if j, dup := seen[node]; dup {
			v.ps.add(p, "same node %s as broker.urls[%d]", node, j)
		}
		seen[node] = i
		// One cluster, one vhost: nodes reached through different vhosts
		// would each hold their own copy of the topology.
		if i == 0 {
			vhost0 = uri.Vhost
		} else if uri.Vhost != vhost0 {
			v.ps.add(p, "vhost %q differs from broker.urls[0]'s %q: the nodes of one cluster share one vhost", uri.Vhost, vhost0)
		}
	}
}

// urlErrorText is err's text without the URL that url.Parse puts in it
// (with its password).
func urlErrorText(err error) string {
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = strings.ReplaceAll(msg, ue.Error(), ue.Err.Error())
	}
	return msg
}

// pgErrorText is the reason of a pgx.ParseConfig error without the
// connection string it quotes.
func pgErrorText(err error) string {
	msg := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		if i := strings.LastIndex(msg, "`: "); i >= 0 {
			msg = msg[i+3:]
		}
	}
	return msg
}

// poolRef locates a pool for cross-pool messages.
type poolRef struct {
	path string
	name string
}

func (v *validator) services() {
	if len(v.c.Services) == 0 {
		v.ps.add("services", "at least one service is required")
		return
	}
	serviceNames := map[string]string{}
	poolNames := map[string]string{}
	queues := map[string]poolRef{}
	for i := range v.c.Services {
		s := &v.c.Services[i]
		v.service(i, s, serviceNames)
		for j := range s.Pools {
			v.pool(i, j, &s.Pools[j], poolNames, queues)
		}
		v.horizonSafety(i, s)
		v.routingOverlap(i, s)
		v.outbox(i, s)
		v.processedEvent(i, s)
		v.databasePool(i, s)
	}
}

func (v *validator) service(i int, s *ServiceConfig, names map[string]string) {
	sp := servicePath(i)
	v.uniqueName(sp+".name", "service", s.Name, serviceNameRE, names, "")
	if s.Database == "" {
		v.ps.add(sp+".database", "must not be empty")
	} else if _, err := pgx.ParseConfig(s.Database); err != nil {
		v.ps.add(sp+".database", "invalid PostgreSQL DSN %q: %s", RedactURL(s.Database), pgErrorText(err))
	}
	if s.Horizon <= 0 {
		v.ps.add(sp+".horizon", "must be positive (got %s)", fmtDuration(s.Horizon))
	}
	if s.MinHorizon <= 0 {
		v.ps.add(sp+".min_horizon", "must be positive (got %s)", fmtDuration(s.MinHorizon))
	}
	if s.Horizon > 0 && s.MinHorizon > 0 && s.Horizon < s.MinHorizon && !v.ps.isBad(sp+".min_horizon") {
		v.ps.add(sp+".horizon", "must not be shorter than min_horizon (%s < %s)", fmtDuration(s.Horizon), fmtDuration(s.MinHorizon))
	}
	oneOf(v.ps, sp+".beyond_horizon", s.BeyondHorizon, BeyondHorizonQuarantine, BeyondHorizonProcess)
	if s.Failures.Retention <= 0 {
		v.ps.add(sp+".failures.retention", "must be positive (got %s)", fmtDuration(s.Failures.Retention))
	}
	if s.Purge.Every < purgeEveryMin {
		v.ps.add(sp+".purge.every", "must be at least %s (got %s)", fmtDuration(purgeEveryMin), fmtDuration(s.Purge.Every))
	}
	if s.Purge.BatchSize < 1 || s.Purge.BatchSize > purgeBatchSizeMax {
		v.ps.add(sp+".purge.batch_size", "must be between 1 and %d (got %d)", purgeBatchSizeMax, s.Purge.BatchSize)
	}
}

func (v *validator) pool(i, j int, p *PoolConfig, names map[string]string, queues map[string]poolRef) {
	pp := poolPath(i, j)
	v.uniqueName(pp+".name", "pool", p.Name, poolNameRE, names, "; pool names are unique across services")

	if msg := checkQueueName(p.Queue); msg != "" {
		v.ps.add(pp+".queue", "%s", msg)
	} else if other, dup := queues[p.Queue]; dup {
		v.ps.add(pp+".queue", "queue %q is already used by pool %q (%s)", p.Queue, other.name, other.path)
	} else {
		queues[p.Queue] = poolRef{path: pp, name: p.Name}
	}
	oneOf(v.ps, pp+".queue_type", p.QueueType, QueueQuorum, QueueClassic)

	if len(p.Bindings) == 0 {
		v.ps.add(pp+".bindings", "at least one binding is required")
	}
	for k, b := range p.Bindings {
		if msg := checkBinding(b); msg != "" {
			v.ps.add(fmt.Sprintf("%s.bindings[%d]", pp, k), "%s", msg)
		}
	}
	v.poolHandlers(pp, p)

	if p.Concurrency < 1 || p.Concurrency > concurrencyMax {
		v.ps.add(pp+".concurrency", "must be between 1 and %d (got %d)", concurrencyMax, p.Concurrency)
	}
	v.poolLimits(pp, p)
	if p.Batch.Size < 1 || p.Batch.Size > BatchSizeMax {
		v.ps.add(pp+".batch.size", "must be between 1 and %d (got %d)", BatchSizeMax, p.Batch.Size)
	}
	if p.Batch.Wait < 0 || p.Batch.Wait > batchWaitMax {
		v.ps.add(pp+".batch.wait", "must be between 0s and %s (got %s)", fmtDuration(batchWaitMax), fmtDuration(p.Batch.Wait))
	}
	switch {
	case p.Prefetch > PrefetchMax:
		v.ps.add(pp+".prefetch", "must be at most %d (got %d)", PrefetchMax, p.Prefetch)
	case p.Prefetch < p.Batch.Size && !v.ps.isBad(pp+".batch.size"):
		v.ps.add(pp+".prefetch", "must be at least batch.size (%d), or no batch could ever fill (got %d)", p.Batch.Size, p.Prefetch)
	}
	v.unackedBudget(pp, p)
	if p.PartitionKey != "" && !jsontext.Pointer(p.PartitionKey).IsValid() {
		v.ps.add(pp+".partition_key", "invalid JSON pointer %q: want \"/member\" or \"/member/0/member\" (RFC 6901; ~0 for ~, ~1 for /)", p.PartitionKey)
	}
	if p.Failures.Ordered && p.PartitionKey == "" {
		v.ps.add(pp+".failures.ordered", "needs partition_key: the order kept is each key's")
	}
	for k, d := range p.Retry.Delays {
		if d < retryDelayMin || d > retryDelayMax {
			v.ps.add(fmt.Sprintf("%s.retry.delays[%d]", pp, k), "must be between %s and %s (got %s)",
				fmtDuration(retryDelayMin), fmtDuration(retryDelayMax), fmtDuration(d))
		}
	}
}

// unackedBudget checks the pool's max_unacked_bytes: within range, and
// large enough for one body of broker.max_body_bytes per worker, or the
// body limit would let a pool hold more than its budget (the prefetch is
// never capped below one delivery per worker).
func (v *validator) unackedBudget(pp string, p *PoolConfig) {
	path := pp + ".max_unacked_bytes"
	if p.MaxUnackedBytes < maxUnackedBytesMin || p.MaxUnackedBytes > maxUnackedBytesMax {
		v.ps.add(path, "must be between %d and %d (got %d)", maxUnackedBytesMin, maxUnackedBytesMax, p.MaxUnackedBytes)
		return
	}
	body := v.c.Broker.MaxBodyBytes
	if v.ps.isBad("broker.max_body_bytes") || v.ps.isBad(pp+".concurrency") || body <= 0 {
		return
	}
	if p.MaxUnackedBytes/body < p.Concurrency {
		v.ps.add(path, "%d bytes hold %d bodies of broker.max_body_bytes (%d), fewer than one per worker (concurrency %d): raise max_unacked_bytes to at least %d or lower broker.max_body_bytes",
			p.MaxUnackedBytes, p.MaxUnackedBytes/body, body, p.Concurrency, body*p.Concurrency)
	}
}

// uniqueName checks the name at path: not empty, matching re, and not in
// seen (names to the path that took them), where it is then recorded. note
// ends the duplicate message.
func (v *validator) uniqueName(path, kind, name string, re *regexp.Regexp, seen map[string]string, note string) {
	switch {
	case name == "":
		v.ps.add(path, "must not be empty")
	case !re.MatchString(name):
		v.ps.add(path, "invalid %s name %q: must match %s", kind, name, re)
	default:
		if other, dup := seen[name]; dup {
			v.ps.add(path, "duplicate %s name %q (also %s%s)", kind, name, other, note)
			return
		}
		seen[name] = strings.TrimSuffix(path, ".name")
	}
}

// checkQueueName returns why q cannot be a pool's queue, or "".
func checkQueueName(q string) string {
	switch {
	case q == "":
		return "must not be empty"
	case len(q)+len(failedQueueSuffix) > amqpNameMax:
		return fmt.Sprintf("too long: %d bytes, at most %d so that its failure queue %q fits in %d bytes",
			len(q), amqpNameMax-len(failedQueueSuffix), "<queue>"+failedQueueSuffix, amqpNameMax)
	case !utf8.ValidString(q):
		return "must be valid UTF-8"
	case strings.ContainsFunc(q, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return "must not contain control characters"
	case strings.HasPrefix(q, reservedAMQPPrefix):
		return fmt.Sprintf("invalid queue %q: the %q prefix is reserved by the broker", q, reservedAMQPPrefix)
	case strings.HasSuffix(q, failedQueueSuffix):
		return fmt.Sprintf("invalid queue %q: names ending in %q are reserved for failure queues", q, failedQueueSuffix)
	case strings.HasPrefix(q, delayQueuePrefix):
		return fmt.Sprintf("invalid queue %q: the %q prefix is reserved for the shared retry delay queues", q, delayQueuePrefix)
	case strings.Contains(q, retryQueueInfix):
		return fmt.Sprintf("invalid queue %q: names containing %q are reserved for retry delay queues", q, retryQueueInfix)
	}
	return ""
}

// poolHandlers checks the handler list: non-empty, known, no duplicates,
// and every event of every handler routed by one of the pool's bindings.
func (v *validator) poolHandlers(pp string, p *PoolConfig) {
	if len(p.Handlers) == 0 {
		v.ps.add(pp+".handlers", "at least one handler is required")
		return
	}
	// With a binding that failed to decode or is malformed, which events
	// the pool was meant to route is unclear: skip the routing check.
	bindingsOK := !v.ps.badUnder(pp+".bindings") &&
		!slices.ContainsFunc(p.Bindings, func(b string) bool { return checkBinding(b) != "" })
	seen := map[string]int{}
	for k, h := range p.Handlers {
		hp := fmt.Sprintf("%s.handlers[%d]", pp, k)
		if h == "" {
			v.ps.add(hp, "must not be empty")
			continue
		}
		if first, dup := seen[h]; dup {
			v.ps.add(hp, "duplicate handler %q (also handlers[%d])", h, first)
			continue
		}
		seen[h] = k
		if v.handlers == nil {
			continue
		}
		events, ok := v.handlers.HandlerEvents(h)
		if !ok {
			v.ps.add(hp, "unknown handler %q", h)
			continue
		}
		if !bindingsOK || len(p.Bindings) == 0 {
			continue
		}
		for _, ev := range events {
			if !slices.ContainsFunc(p.Bindings, func(b string) bool { return topicMatch(b, ev) }) {
				v.ps.add(hp, "handler %q handles event %q, which no binding of the pool routes to queue %q (bindings: %s)",
					h, ev, p.Queue, strings.Join(p.Bindings, ", "))
			}
		}
	}
}

// horizonSafety checks that the service's horizon is longer than the retry
// span of each of its pools: a message still in retry must not fall beyond
// the horizon, where a duplicate of it could no longer be recognised.
func (v *validator) horizonSafety(i int, s *ServiceConfig) {
	sp := servicePath(i)
	if s.Horizon <= 0 || v.ps.isBad(sp+".horizon") {
		return
	}
	for j, p := range s.Pools {
		if v.ps.badUnder(poolPath(i, j) + ".retry") {
			continue
		}
		if span := p.RetrySpan(); s.Horizon <= span {
			v.ps.add(sp+".horizon", "must be longer than the retry span of pool %q (%s, the sum of its retry delays), got %s",
				p.Name, fmtDuration(span), fmtDuration(s.Horizon))
		}
	}
}

// routingOverlap checks that no event handled by a pool of the service is
// also routed to another pool of the same service. Events are deduplicated
// per service (one processed_event table), so whichever pool took the event
// first would mark it processed and the other pool would skip it as a
// duplicate, without running its handlers.
func (v *validator) routingOverlap(i int, s *ServiceConfig) {
	if v.handlers == nil || len(s.Pools) < 2 {
		return
	}
	reported := map[string]bool{}
	for j, p := range s.Pools {
		for _, h := range p.Handlers {
			events, ok := v.handlers.HandlerEvents(h)
			if !ok {
				continue
			}
			for _, ev := range events {
				for k, q := range s.Pools {
					if k == j || v.ps.badUnder(poolPath(i, k)+".bindings") {
						continue
					}
					for b, pattern := range q.Bindings {
						bp := fmt.Sprintf("%s.bindings[%d]", poolPath(i, k), b)
						if reported[bp+"\x00"+ev] || checkBinding(pattern) != "" || !topicMatch(pattern, ev) {
							continue
						}
						reported[bp+"\x00"+ev] = true
						v.ps.add(bp, "binding %q also routes event %q, handled by pool %q of the same service: "+
							"events are deduplicated per service, so only the first pool to take it would run its handlers",
							pattern, ev, p.Name)
					}
				}
			}
		}
	}
}

// oneOf adds a problem at path unless value is one of allowed.
func oneOf(ps *problems, path, value string, allowed ...string) {
	if !slices.Contains(allowed, value) {
		ps.add(path, "must be one of %s (got %q)", strings.Join(allowed, ", "), value)
	}
}

// fmtDuration formats d without trailing zero units: 24h, 10m, 1h30m.
func fmtDuration(d time.Duration) string { return FormatDuration(d) }

// FormatDuration formats d as a config file writes it: Go's form without
// trailing zero units (24h, 10m, 1h30m). The console shows durations in
// the same form.
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}
