package main

// This file reads the daemon's YAML config, as any program can: the demo
// needs a few keys of it (addresses, the broker, the services' databases,
// pools and queues), read with a YAML library after the same ${VAR} and
// ${VAR:-default} expansion the daemon applies. The daemon's own loader
// (daemon.LoadConfig) validates the file first, so a config the daemon
// refuses is refused here with its messages.

import (
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"time"

	"github.com/goccy/go-yaml"

	"github.com/platformd/platformd/consumer"
	pdaemon "github.com/platformd/platformd/daemon"
	"github.com/platformd/platformd/examples/shop"
)

// shopConfig holds the keys of the daemon's config that the demo reads.
type shopConfig struct {
	Admin struct {
		Listen string        `yaml:"listen"`
		Tokens []tokenConfig `yaml:"tokens"`
	} `yaml:"admin"`
	Metrics struct {
		Listen string `yaml:"listen"`
	} `yaml:"metrics"`
	Broker struct {
		URL      string   `yaml:"url"`
		URLs     []string `yaml:"urls"`
		Exchange string   `yaml:"exchange"`
	} `yaml:"broker"`
	Services []serviceConfig `yaml:"services"`
}

type tokenConfig struct {
	Name  string `yaml:"name"`
	Role  string `yaml:"role"`
	Token string `yaml:"token"`
}

type serviceConfig struct {
	Name     string `yaml:"name"`
	Database string `yaml:"database"`
	Outbox   struct {
		Relay bool `yaml:"relay"`
	} `yaml:"outbox"`
	Pools          []poolConfig    `yaml:"pools"`
	SQLHandlers    []handlerConfig `yaml:"sql_handlers"`
	RemoteHandlers []handlerConfig `yaml:"remote_handlers"`
}

type handlerConfig struct {
	Name   string   `yaml:"name"`
	Events []string `yaml:"events"`
	URL    string   `yaml:"url"`
}

type poolConfig struct {
	Name     string   `yaml:"name"`
	Queue    string   `yaml:"queue"`
	Bindings []string `yaml:"bindings"`
	Handlers []string `yaml:"handlers"`
	Retry    struct {
		Delays []string `yaml:"delays"`
	} `yaml:"retry"`
}

// roleAdmin is the admin token role that may change things.
const roleAdmin = "admin"

// delayQueuePrefix names the daemon's shared retry delay queues: one per
// delay, "platformd.retry.<delay>" with the delay as Go prints it (docs/contracts.md).
const delayQueuePrefix = "platformd.retry."

// envRef is a ${VAR} or ${VAR:-default} reference in the config.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)(:-([^}]*))?\}`)

// expandEnv replaces every ${VAR} by the variable's value and every
// ${VAR:-default} by it, or by default when the variable is unset or empty.
func expandEnv(data []byte) []byte {
	return envRef.ReplaceAllFunc(data, func(ref []byte) []byte {
		m := envRef.FindSubmatch(ref)
		if v := os.Getenv(string(m[1])); v != "" || len(m[2]) == 0 {
			return []byte(v)
		}
		return m[3]
	})
}

// loadConfig validates the config at path with the daemon's own loader
// (against the shop's Go handlers, as shopd runs it) and reads the keys the
// demo needs.
func loadConfig(path string) (*shopConfig, error) {
	reg := consumer.NewRegistry()
	if err := shop.Register(reg); err != nil {
		return nil, fmt.Errorf("register the shop's handlers: %w", err)
	}
	if _, err := pdaemon.LoadConfig(path, reg); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read the config: %w", err)
	}
	var c shopConfig
	if err := yaml.Unmarshal(expandEnv(data), &c); err != nil {
		return nil, fmt.Errorf("read the config %s: %w", path, err)
	}
	if c.Broker.URL == "" && len(c.Broker.URLs) > 0 {
		c.Broker.URL = c.Broker.URLs[0]
	}
	return &c, nil
}

// service returns the service called name.
func (c *shopConfig) service(name string) (serviceConfig, bool) {
	i := slices.IndexFunc(c.Services, func(s serviceConfig) bool { return s.Name == name })
	if i < 0 {
		return serviceConfig{}, false
	}
	return c.Services[i], true
}

// redactURL returns u with its password hidden, for messages.
func redactURL(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(unparsable URL)"
	}
	return p.Redacted()
}

// newTarget returns the target of pool p of service s: its queue and its
// retry delay queues are watched.
func newTarget(s serviceConfig, p poolConfig) (*target, error) {
	t := &target{service: s.Name, pool: p.Name, queue: p.Queue, watched: []string{p.Queue}, dsn: s.Database}
	for _, d := range p.Retry.Delays {
		dur, err := time.ParseDuration(d)
		if err != nil {
			return nil, fmt.Errorf("pool %s: retry delay %q: %w", p.Name, d, err)
		}
		t.watched = append(t.watched, delayQueuePrefix+dur.String())
	}
	return t, nil
}

// findTarget finds the pool that applies event: the one running the
// shop's Go handler, or a SQL handler of its service declared for event
// (examples/shop-sql).
func findTarget(cfg *shopConfig, handler, event string) (*target, string, error) {
	for _, s := range cfg.Services {
		applies := func(name string) bool {
			return name == handler || slices.ContainsFunc(s.SQLHandlers, func(h handlerConfig) bool {
				return h.Name == name && slices.Contains(h.Events, event)
			})
		}
		for _, p := range s.Pools {
			if slices.ContainsFunc(p.Handlers, applies) {
				t, err := newTarget(s, p)
				return t, s.Database, err
			}
		}
	}
	return nil, "", fmt.Errorf("no pool of the config runs handler %s or a SQL handler of %s: the demo needs the shop's pools", handler, event)
}

// orderService is the producer's service name in the shop's config.
const orderService = "order"

// billingService is the optional billing service's name in the config.
const billingService = "billing"

// findProducer returns the DSN of the shop's order service: the producer,
// with an outbox and no pools.
func findProducer(cfg *shopConfig) (string, error) {
	s, ok := cfg.service(orderService)
	if !ok || !s.Outbox.Relay {
		return "", fmt.Errorf("the config has no service %q with its outbox relay on: the demo writes the shop's orders there", orderService)
	}
	return s.Database, nil
}

// findBilling finds the billing service's pool that applies
// order.order.placed.v1 (examples/shop-php: a remote handler in PHP), or
// nil when the config has none.
func findBilling(cfg *shopConfig) (*target, string, error) {
	s, ok := cfg.service(billingService)
	if !ok {
		return nil, "", nil
	}
	for _, p := range s.Pools {
		if slices.Contains(p.Bindings, shop.EventOrderPlaced) {
			t, err := newTarget(s, p)
			return t, s.Database, err
		}
	}
	return nil, "", nil
}
