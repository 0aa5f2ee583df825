package config

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Edits used by several cases.
const (
	dashToken    = `{name: dash, role: read, token: "read-token-0123456789"}`
	stockPoolEnd = "        retry: {delays: [1s, 10s, 1m, 10m]}\n"
	shippingPool = "      - name: shipping-events\n        queue: shipping.events\n"
)

func TestValidation(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		// edits are old/new pairs applied to baseYAML; editsFn, if set,
		// returns more, given a temporary directory.
		edits   []string
		editsFn func(t *testing.T, dir string) []string
		path    string // "" for a valid config
		msg     string // a substring of the message
	}{
		// log
		{name: "LogLevel", edits: []string{"level: info", "level: verbose"},
			path: "log.level", msg: `must be one of debug, info, warn, error (got "verbose")`},
		{name: "LogFormat", edits: []string{"format: json", "format: xml"},
			path: "log.format", msg: `must be one of json, text (got "xml")`},
		{name: "LogLevelDebugText", edits: []string{"level: info, format: json", "level: debug, format: text"}},

		// listen addresses
		{name: "AdminListenNoPort", edits: []string{"listen: 127.0.0.1:7070", "listen: localhost"},
			path: "admin.listen", msg: `invalid address "localhost": want host:port`},
		{name: "AdminListenBadPort", edits: []string{"listen: 127.0.0.1:7070", "listen: 127.0.0.1:99999"},
			path: "admin.listen", msg: `invalid port "99999"`},
		{name: "AdminListenBadHost", edits: []string{"listen: 127.0.0.1:7070", `listen: "bad host:7070"`},
			path: "admin.listen", msg: `invalid host "bad host"`},
		{name: "AdminListenAllInterfaces", edits: []string{"listen: 127.0.0.1:7070", `listen: ":7070"`}},
		{name: "AdminListenIPv6", edits: []string{"listen: 127.0.0.1:7070", `listen: "[::1]:7070"`}},
		{name: "MetricsListen", edits: []string{"listen: 127.0.0.1:9464", "listen: nope"},
			path: "metrics.listen", msg: `invalid address "nope": want host:port (or "-" to disable)`},
		{name: "MetricsListenDisabled", edits: []string{"listen: 127.0.0.1:9464", `listen: "-"`}},
		{name: "MetricsSameAsAdmin", edits: []string{"listen: 127.0.0.1:9464", "listen: 127.0.0.1:7070"},
			path: "metrics.listen", msg: "same address as admin.listen"},

		// tokens
		{name: "TokenNameEmpty", edits: []string{"name: dash,", `name: "",`},
			path: "admin.tokens[1].name", msg: "must not be empty"},
		{name: "TokenNameDuplicate", edits: []string{"name: dash,", "name: ops,"},
			path: "admin.tokens[1].name", msg: `duplicate token name "ops" (also admin.tokens[0])`},
		{name: "TokenRole", edits: []string{"role: read", "role: reader"},
			path: "admin.tokens[1].role", msg: `must be one of read, admin (got "reader")`},
		{name: "TokenAndTokenFile", edits: []string{dashToken, `{name: dash, role: read, token: "read-token-0123456789", token_file: read.token}`},
			path: "admin.tokens[1]", msg: "set only one of token and token_file"},
		{name: "TokenMissing", edits: []string{dashToken, `{name: dash, role: read}`},
			path: "admin.tokens[1]", msg: "one of token and token_file is required"},
		{name: "TokenEmpty", edits: []string{dashToken, `{name: dash, role: read, token: ""}`},
			path: "admin.tokens[1].token", msg: "must not be empty"},
		{name: "TokenShort", edits: []string{dashToken, `{name: dash, role: read, token: "short-token"}`},
			path: "admin.tokens[1].token", msg: "token is too short (11 characters, at least 16 required)"},
		{name: "TokenNotPrintable", edits: []string{dashToken, `{name: dash, role: read, token: "read token 0123456789"}`},
			path: "admin.tokens[1].token", msg: "printable ASCII without spaces"},
		{name: "TokenDuplicate", edits: []string{`token: "read-token-0123456789"`, `token: "admin-token-0123456789"`},
			path: "admin.tokens[1].token", msg: "same token as admin.tokens[0]"},
		{name: "TokenFileEmptyKey", edits: []string{dashToken, `{name: dash, role: read, token_file: ""}`},
			path: "admin.tokens[1].token_file", msg: "must not be empty"},
		{name: "TokenFileMissing", editsFn: func(t *testing.T, dir string) []string {
			return []string{dashToken, `{name: dash, role: read, token_file: "` + filepath.Join(dir, "nope.token") + `"}`}
		}, path: "admin.tokens[1].token_file", msg: "cannot read token file: open "},
		{name: "TokenFileBlank", editsFn: func(t *testing.T, dir string) []string {
			p := writeFile(t, dir, "blank.token", " \n\t\n")
			return []string{dashToken, `{name: dash, role: read, token_file: "` + p + `"}`}
		}, path: "admin.tokens[1].token_file", msg: "is empty"},
		{name: "TokenFileShort", editsFn: func(t *testing.T, dir string) []string {
			p := writeFile(t, dir, "short.token", "  short  \n")
			return []string{dashToken, `{name: dash, role: read, token_file: "` + p + `"}`}
		}, path: "admin.tokens[1].token_file", msg: "token is too short (5 characters"},
		{name: "TokenFileSameAsToken", editsFn: func(t *testing.T, dir string) []string {
			p := writeFile(t, dir, "same.token", "admin-token-0123456789\n")
			return []string{dashToken, `{name: dash, role: read, token_file: "` + p + `"}`}
		}, path: "admin.tokens[1].token_file", msg: "same token as admin.tokens[0]"},

		// TLS
		{name: "TLSCertWithoutKey", editsFn: func(t *testing.T, dir string) []string {
			cert, _ := writeCert(t, dir)
			return []string{"metrics:", "  tls: {cert_file: \"" + cert + "\"}\nmetrics:"}
		}, path: "admin.tls.key_file", msg: "required when cert_file is set"},
		{name: "TLSKeyWithoutCert", editsFn: func(t *testing.T, dir string) []string {
			_, key := writeCert(t, dir)
			return []string{"metrics:", "  tls: {key_file: \"" + key + "\"}\nmetrics:"}
		}, path: "admin.tls.cert_file", msg: "required when key_file is set"},
		{name: "TLSClientCAWithoutCert", editsFn: func(t *testing.T, dir string) []string {
			cert, _ := writeCert(t, dir)
			return []string{"metrics:", "  tls: {client_ca_file: \"" + cert + "\"}\nmetrics:"}
		}, path: "admin.tls.client_ca_file", msg: "requires cert_file and key_file"},
		{name: "TLSFileMissing", editsFn: func(t *testing.T, dir string) []string {
			_, key := writeCert(t, dir)
			return []string{"metrics:", "  tls: {cert_file: \"" + filepath.Join(dir, "none.pem") + "\", key_file: \"" + key + "\"}\nmetrics:"}
		}, path: "admin.tls.cert_file", msg: "does not exist"},
		{name: "TLSBadPair", editsFn: func(t *testing.T, dir string) []string {
			_, key := writeCert(t, dir)
			bad := writeFile(t, dir, "bad.pem", "not a certificate")
			return []string{"metrics:", "  tls: {cert_file: \"" + bad + "\", key_file: \"" + key + "\"}\nmetrics:"}
		}, path: "admin.tls.cert_file", msg: "invalid certificate or key"},
		{name: "TLSBadClientCA", editsFn: func(t *testing.T, dir string) []string {
			cert, key := writeCert(t, dir)
			bad := writeFile(t, dir, "ca.pem", "not a certificate")
			return []string{"metrics:", "  tls: {cert_file: \"" + cert + "\", key_file: \"" + key + "\", client_ca_file: \"" + bad + "\"}\nmetrics:"}
		}, path: "admin.tls.client_ca_file", msg: "no PEM certificate found"},
		{name: "TLSValidMutual", editsFn: func(t *testing.T, dir string) []string {
			cert, key := writeCert(t, dir)
			return []string{"metrics:", "  tls: {cert_file: \"" + cert + "\", key_file: \"" + key + "\", client_ca_file: \"" + cert + "\"}\nmetrics:"}
		}},

		// broker
		{name: "BrokerURL", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`, `url: "http://guest:guest@127.0.0.1:5672/"`},
			path: "broker.url", msg: `invalid AMQP URL "http://guest:xxxxx@127.0.0.1:5672/": AMQP scheme must be either 'amqp://' or 'amqps://'`},
		{name: "BrokerURLHidesPassword", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`, `url: "amqp://guest:sec%zzret@127.0.0.1:5672/"`},
			path: "broker.url", msg: `invalid AMQP URL "amqp://guest:xxxxx@127.0.0.1:5672/": invalid URL escape "%zz"`},
		{name: "BrokerURLsCluster", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`,
			`urls: ["amqp://guest:guest@10.0.0.1:5672/", "amqp://guest:guest@10.0.0.2:5672/", "amqps://guest:guest@rabbit-3.internal/"]`}},
		{name: "BrokerURLAndURLs", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`,
			`url: "amqp://guest:guest@127.0.0.1:5672/", urls: ["amqp://guest:guest@10.0.0.1:5672/"]`},
			path: "broker.urls", msg: "set broker.url (one node) or broker.urls (a cluster), not both"},
		{name: "BrokerURLsEmpty", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`, `urls: []`},
			path: "broker.urls", msg: "must list at least one AMQP URL"},
		{name: "BrokerURLsBadOne", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`,
			`urls: ["amqp://guest:s3cret@10.0.0.1:5672/", "http://guest:s3cret@10.0.0.2:5672/"]`},
			path: "broker.urls[1]", msg: `invalid AMQP URL "http://guest:xxxxx@10.0.0.2:5672/": AMQP scheme must be either 'amqp://' or 'amqps://'`},
		{name: "BrokerURLsHidesPassword", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`,
			`urls: ["amqp://guest:sec%zzret@10.0.0.1:5672/"]`},
			path: "broker.urls[0]", msg: `invalid AMQP URL "amqp://guest:xxxxx@10.0.0.1:5672/": invalid URL escape "%zz"`},
		{name: "BrokerURLsSameNode", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`,
			`urls: ["amqp://guest:guest@10.0.0.1/", "amqp://guest:guest@10.0.0.1:5672/"]`},
			path: "broker.urls[1]", msg: "same node 10.0.0.1:5672 as broker.urls[0]"},
		{name: "BrokerURLsVhosts", edits: []string{`url: "amqp://guest:guest@127.0.0.1:5672/"`,
			`urls: ["amqp://guest:guest@10.0.0.1/shop", "amqp://guest:guest@10.0.0.2/"]`},
			path: "broker.urls[1]", msg: `vhost "/" differs from broker.urls[0]'s "shop"`},
		{name: "BrokerExchangeEmpty", edits: []string{"exchange: events", `exchange: ""`},
			path: "broker.exchange", msg: "must not be empty"},
		{name: "BrokerExchangeDelayPrefix", edits: []string{"exchange: events", `exchange: platformd.retry.1s`},
			path: "broker.exchange", msg: `the "platformd.retry." prefix is reserved for the retry delay exchanges`},
		{name: "BrokerMaxBodyBytes", edits: []string{"max_body_bytes: 1048576", "max_body_bytes: 0"},
			path: "broker.max_body_bytes", msg: "must be between 1 and 536870912 (got 0)"},

		// services
		{name: "NoServices", edits: []string{baseYAML, "log: {level: info}\nservices: []\n"},
			path: "services", msg: "at least one service is required"},
		{name: "ServicesAbsent", edits: []string{baseYAML, "log: {level: info}\n"},
			path: "services", msg: "at least one service is required"},
		{name: "ServiceNameEmpty", edits: []string{"name: stock\n", "name: \"\"\n"},
			path: "services[0].name", msg: "must not be empty"},
		{name: "ServiceNameInvalid", edits: []string{"name: stock\n", "name: Stock\n"},
			path: "services[0].name", msg: `invalid service name "Stock": must match ^[a-z][a-z0-9_-]*$`},
		{name: "ServiceNameDuplicate", edits: []string{"name: shipping\n", "name: stock\n"},
			path: "services[1].name", msg: `duplicate service name "stock" (also services[0])`},
		// A standby or several: pgx tries the hosts in order and keeps the
		// one that accepts writes.
		{name: "DatabaseMultiHostKeyValue", edits: []string{"database: postgres://postgres@127.0.0.1:5432/stock",
			`database: "host=10.0.0.1,10.0.0.2 port=5432,5433 user=postgres dbname=stock target_session_attrs=read-write"`}},
		{name: "DatabaseMultiHostURL", edits: []string{"database: postgres://postgres@127.0.0.1:5432/stock",
			"database: postgres://postgres@10.0.0.1:5432,10.0.0.2:5432/stock?target_session_attrs=read-write"}},
		{name: "DatabaseMultiHostBadAttrs", edits: []string{"database: postgres://postgres@127.0.0.1:5432/stock",
			"database: postgres://postgres:s3cret@10.0.0.1,10.0.0.2/stock?target_session_attrs=writable"},
			path: "services[0].database", msg: `invalid PostgreSQL DSN "postgres://postgres:xxxxx@10.0.0.1,10.0.0.2/stock?target_session_attrs=writable": `},
		{name: "DatabaseEmpty", edits: []string{"database: postgres://postgres@127.0.0.1:5432/stock", `database: ""`},
			path: "services[0].database", msg: "must not be empty"},
		{name: "DatabaseInvalid", edits: []string{"database: postgres://postgres@127.0.0.1:5432/stock", "database: postgres://postgres:s3cret@127.0.0.1:port/stock"},
			path: "services[0].database", msg: `invalid PostgreSQL DSN "postgres://postgres:xxxxx@127.0.0.1:port/stock": `},
		{name: "DatabaseInvalidKeyValue", edits: []string{"dbname=shipping", "dbname=shipping port=abc password=s3cret"},
			path: "services[1].database", msg: `invalid PostgreSQL DSN "host=127.0.0.1 user=postgres dbname=shipping port=abc password=xxxxx": `},
		{name: "HorizonZero", edits: []string{"horizon: 336h", "horizon: 0s"},
			path: "services[0].horizon", msg: "must be positive (got 0s)"},
		{name: "MinHorizonNegative", edits: []string{"min_horizon: 24h", "min_horizon: -1h"},
			path: "services[0].min_horizon", msg: "must be positive (got -1h)"},
		{name: "HorizonUnderMin", edits: []string{"horizon: 336h", "horizon: 12h"},
			path: "services[0].horizon", msg: "must not be shorter than min_horizon (12h < 24h)"},
		{name: "BeyondHorizon", edits: []string{"beyond_horizon: quarantine", "beyond_horizon: drop"},
			path: "services[0].beyond_horizon", msg: `must be one of quarantine, process (got "drop")`},
		{name: "BeyondHorizonProcess", edits: []string{"beyond_horizon: quarantine", "beyond_horizon: process"}},
		{name: "PurgeEvery", edits: []string{"every: 15m", "every: 500ms"},
			path: "services[0].purge.every", msg: "must be at least 1s (got 500ms)"},
		{name: "PurgeBatchSizeZero", edits: []string{"batch_size: 10000", "batch_size: 0"},
			path: "services[0].purge.batch_size", msg: "must be between 1 and 1000000 (got 0)"},
		{name: "PurgeBatchSizeHuge", edits: []string{"batch_size: 10000", "batch_size: 1000001"},
			path: "services[0].purge.batch_size", msg: "must be between 1 and 1000000 (got 1000001)"},

		// pools
		{name: "NoPools", edits: []string{shippingPool + "        bindings: [\"order.order.*.v1\"]\n        handlers: [shipping.track_status]\n", ""},
			path: "services[1].pools", msg: "at least one pool is required"},
		{name: "PoolNameEmpty", edits: []string{"name: shipping-events", `name: ""`},
			path: "services[1].pools[0].name", msg: "must not be empty"},
		{name: "PoolNameInvalid", edits: []string{"name: shipping-events", "name: Shipping_Events"},
			path: "services[1].pools[0].name", msg: `invalid pool name "Shipping_Events": must match ^[a-z][a-z0-9_.-]*$`},
		{name: "PoolNameDuplicateAcrossServices", edits: []string{"name: shipping-events", "name: stock-events"},
			path: "services[1].pools[0].name", msg: `duplicate pool name "stock-events" (also services[0].pools[0]`},
		{name: "QueueEmpty", edits: []string{"queue: shipping.events", `queue: ""`},
			path: "services[1].pools[0].queue", msg: "must not be empty"},
		{name: "QueueReservedPrefix", edits: []string{"queue: shipping.events", "queue: amq.shipping"},
			path: "services[1].pools[0].queue", msg: `the "amq." prefix is reserved`},
		{name: "QueueFailedSuffix", edits: []string{"queue: shipping.events", "queue: shipping.events.failed"},
			path: "services[1].pools[0].queue", msg: `names ending in ".failed" are reserved for failure queues`},
		{name: "QueueRetryInfix", edits: []string{"queue: shipping.events", "queue: shipping.retry.events"},
			path: "services[1].pools[0].queue", msg: `names containing ".retry." are reserved for retry delay queues`},
		{name: "QueueDelayPrefix", edits: []string{"queue: shipping.events", "queue: platformd.retry.1s"},
			path: "services[1].pools[0].queue", msg: `the "platformd.retry." prefix is reserved for the shared retry delay queues`},
		{name: "QueueTooLong", edits: []string{"queue: shipping.events", "queue: " + strings.Repeat("q", 249)},
			path: "services[1].pools[0].queue", msg: "too long: 249 bytes, at most 248"},
		{name: "QueueLongest", edits: []string{"queue: shipping.events", "queue: " + strings.Repeat("q", 248)}},
		{name: "QueueDuplicateAcrossServices", edits: []string{"queue: shipping.events", "queue: stock.events"},
			path: "services[1].pools[0].queue", msg: `queue "stock.events" is already used by pool "stock-events" (services[0].pools[0])`},
		{name: "QueueType", edits: []string{"queue_type: quorum", "queue_type: stream"},
			path: "services[0].pools[0].queue_type", msg: `must be one of quorum, classic (got "stream")`},
		{name: "QueueTypeClassic", edits: []string{"queue_type: quorum", "queue_type: classic"}},
		{name: "BindingsEmpty", edits: []string{`bindings: ["order.order.*.v1"]`, "bindings: []"},
			path: "services[1].pools[0].bindings", msg: "at least one binding is required"},
		{name: "BindingWildcardInWord", edits: []string{`bindings: ["order.order.*.v1"]`, `bindings: ["order.order.status_changed.v1", "order.*x"]`},
			path: "services[1].pools[0].bindings[1]", msg: `invalid binding "order.*x": "*" and "#" must be whole words`},
		{name: "BindingEmptyWord", edits: []string{`bindings: ["order.order.*.v1"]`, `bindings: ["order.order.status_changed.v1", "order..x"]`},
			path: "services[1].pools[0].bindings[1]", msg: `invalid binding "order..x": empty word`},
		{name: "BindingEmpty", edits: []string{`bindings: ["order.order.*.v1"]`, `bindings: ["order.order.status_changed.v1", ""]`},
			path: "services[1].pools[0].bindings[1]", msg: "must not be empty"},
		{name: "BindingHash", edits: []string{`bindings: ["order.order.*.v1"]`, `bindings: ["order.#.v1"]`}},
		{name: "HandlersEmpty", edits: []string{"handlers: [shipping.track_status]", "handlers: []"},
			path: "services[1].pools[0].handlers", msg: "at least one handler is required"},
		{name: "HandlerUnknown", edits: []string{"handlers: [stock.reserve]", "handlers: [stock.reserve, x]"},
			path: "services[0].pools[0].handlers[1]", msg: `unknown handler "x"`},
		{name: "HandlerDuplicate", edits: []string{"handlers: [stock.reserve]", "handlers: [stock.reserve, stock.reserve]"},
			path: "services[0].pools[0].handlers[1]", msg: `duplicate handler "stock.reserve" (also handlers[0])`},
		{name: "HandlerEventNotRouted", edits: []string{
			"handlers: [stock.reserve]", "handlers: [stock.reserve, stock.release]",
			"bindings: [order.order.placed.v1]", "bindings: [order.order.placed.v1, order.order.expired.v1]",
		},
			path: "services[0].pools[0].handlers[1]", msg: `handler "stock.release" handles event "order.order.cancelled.v1", which no binding of the pool routes to queue "stock.events" (bindings: order.order.placed.v1, order.order.expired.v1)`},
		{name: "HandlerEventsRoutedByHash", edits: []string{
			"handlers: [stock.reserve]", "handlers: [stock.reserve, stock.release]",
			"bindings: [order.order.placed.v1]", `bindings: ["order.#"]`,
		}},
		{name: "ConcurrencyZero", edits: []string{"concurrency: 4", "concurrency: 0"},
			path: "services[0].pools[0].concurrency", msg: "must be between 1 and 256 (got 0)"},
		{name: "ConcurrencyHuge", edits: []string{"concurrency: 4", "concurrency: 257"},
			path: "services[0].pools[0].concurrency", msg: "must be between 1 and 256 (got 257)"},
		{name: "BatchSizeZero", edits: []string{"batch: {size: 100", "batch: {size: 0"},
			path: "services[0].pools[0].batch.size", msg: "must be between 1 and 10000 (got 0)"},
		{name: "BatchSizeHuge", edits: []string{"batch: {size: 100", "batch: {size: 10001", "prefetch: 400", "prefetch: 20000"},
			path: "services[0].pools[0].batch.size", msg: "must be between 1 and 10000 (got 10001)"},
		{name: "BatchWaitNegative", edits: []string{"wait: 5ms", "wait: -1ms"},
			path: "services[0].pools[0].batch.wait", msg: "must be between 0s and 10s (got -1ms)"},
		{name: "BatchWaitLong", edits: []string{"wait: 5ms", "wait: 11s"},
			path: "services[0].pools[0].batch.wait", msg: "must be between 0s and 10s (got 11s)"},
		{name: "PrefetchUnderBatch", edits: []string{"prefetch: 400", "prefetch: 99"},
			path: "services[0].pools[0].prefetch", msg: "must be at least batch.size (100)"},
		{name: "PrefetchHuge", edits: []string{"prefetch: 400", "prefetch: 65536"},
			path: "services[0].pools[0].prefetch", msg: "must be at most 65535 (got 65536)"},
		{name: "RetryDelayShort", edits: []string{"delays: [1s, 10s, 1m, 10m]", "delays: [50ms, 10s, 1m, 10m]"},
			path: "services[0].pools[0].retry.delays[0]", msg: "must be between 100ms and 24h (got 50ms)"},
		{name: "RetryDelayLong", edits: []string{"delays: [1s, 10s, 1m, 10m]", "delays: [1s, 10s, 1m, 25h]"},
			path: "services[0].pools[0].retry.delays[3]", msg: "must be between 100ms and 24h (got 25h)"},

		// horizon safety
		{name: "HorizonShorterThanRetrySpan", edits: []string{"horizon: 336h", "horizon: 10m", "min_horizon: 24h", "min_horizon: 1m"},
			path: "services[0].horizon", msg: `must be longer than the retry span of pool "stock-events" (11m11s, the sum of its retry delays), got 10m`},
		{name: "HorizonEqualToRetrySpan", edits: []string{"horizon: 336h", "horizon: 48h", "delays: [1s, 10s, 1m, 10m]", "delays: [24h, 24h]"},
			path: "services[0].horizon", msg: `must be longer than the retry span of pool "stock-events" (48h`},
		{name: "HorizonDefaultDelays", edits: []string{"    pools:\n      - name: shipping-events", "    horizon: 11m11s\n    min_horizon: 1m\n    pools:\n      - name: shipping-events"},
			path: "services[1].horizon", msg: `retry span of pool "shipping-events" (11m11s`},
		{name: "HorizonJustLongerThanRetrySpan", edits: []string{"horizon: 336h", "horizon: 11m12s", "min_horizon: 24h", "min_horizon: 1m"}},

		// partition key
		{name: "PartitionKey", edits: []string{stockPoolEnd, stockPoolEnd + "        partition_key: /order_id\n"}},
		{name: "FailuresOrdered", edits: []string{stockPoolEnd, stockPoolEnd + "        partition_key: /order_id\n        failures: {ordered: true}\n"}},
		{name: "FailuresOrderedWithoutKey", edits: []string{stockPoolEnd, stockPoolEnd + "        failures: {ordered: true}\n"},
			path: "services[0].pools[0].failures.ordered", msg: "needs partition_key"},
		{name: "PartitionKeyNested", edits: []string{stockPoolEnd, stockPoolEnd + "        partition_key: /order/lines/0/product_id\n"}},
		{name: "PartitionKeyNoSlash", edits: []string{stockPoolEnd, stockPoolEnd + "        partition_key: order_id\n"},
			path: "services[0].pools[0].partition_key", msg: `invalid JSON pointer "order_id"`},
		{name: "PartitionKeyBadEscape", edits: []string{stockPoolEnd, stockPoolEnd + "        partition_key: /a~2b\n"},
			path: "services[0].pools[0].partition_key", msg: `invalid JSON pointer "/a~2b"`},

		// routing across the pools of one service
		{name: "TwoPoolsRouteOneEvent", edits: []string{stockPoolEnd, stockPoolEnd +
			"      - name: stock-release\n        queue: stock.release\n        bindings: [\"order.#\"]\n        handlers: [stock.release]\n"},
			path: "services[0].pools[1].bindings[0]", msg: `binding "order.#" also routes event "order.order.placed.v1", handled by pool "stock-events" of the same service`},
		{name: "TwoPoolsSplitEvents", edits: []string{stockPoolEnd, stockPoolEnd +
			"      - name: stock-release\n        queue: stock.release\n        bindings: [\"order.order.cancelled.*\", \"order.order.expired.*\"]\n        handlers: [stock.release]\n"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			edits := tt.edits
			if tt.editsFn != nil {
				edits = append(edits, tt.editsFn(t, t.TempDir())...)
			}
			_, err := parseWith(t, edit(t, baseYAML, edits...), nil)
			if tt.path == "" {
				require.NoError(t, err)
				return
			}
			ps := requireProblems(t, err)
			require.Len(t, ps, 1, "problems: %v", ps)
			require.Equal(t, tt.path, ps[0].Path)
			require.Contains(t, ps[0].Message, tt.msg)
			// Secrets in the edits never reach a message.
			require.NotContains(t, ps[0].Message, "s3cret")
			require.NotContains(t, ps[0].Message, "sec%zzret")
		})
	}
}

func TestSeveralMistakes(t *testing.T) {
	t.Parallel()
	data := edit(t, baseYAML,
		"level: info", "level: loud",
		"listen: 127.0.0.1:9464", "listen: nowhere",
		`token: "read-token-0123456789"`, `token: "${DASH_TOKEN}"`,
		"horizon: 336h", "horizon: 3 days",
		"        concurrency: 4\n", "        concurrency: 4\n        batchsize: 10\n",
		"handlers: [stock.reserve]", "handlers: [stock.reserve, x]",
		"name: shipping-events", "name: stock-events",
		"queue: shipping.events", "queue: shipping.events.failed",
	)
	_, err := parseWith(t, data, nil)
	ps := requireProblems(t, err)
	require.Equal(t, []string{
		// decoding, in document order
		"admin.tokens[1].token",
		"services[0].horizon",
		"services[0].pools[0].batchsize",
		// validation, in config order
		"log.level",
		"metrics.listen",
		"services[0].pools[0].handlers[1]",
		"services[1].pools[0].name",
		"services[1].pools[0].queue",
	}, paths(ps))
	require.Equal(t, `environment variable "DASH_TOKEN" is not set`, ps[0].Message)
	require.Equal(t, `invalid duration "3 days"`, ps[1].Message)
	require.Equal(t, "unknown key", ps[2].Message)
	require.Equal(t, `unknown handler "x"`, ps[5].Message)
}

func TestNilCatalogSkipsHandlerChecks(t *testing.T) {
	t.Parallel()
	data := edit(t, baseYAML, "handlers: [stock.reserve]", "handlers: [anything]")
	_, err := parse("test.yaml", []byte(data), nil, parseOptions{lookup: env{}.lookup})
	require.NoError(t, err)
}
