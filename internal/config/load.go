package config

import (
	"fmt"
	"os"
	"path/filepath"
)

// HandlerCatalog tells which handler names exist and which event names each
// handles. The consumer registry implements it through an adapter.
type HandlerCatalog interface {
	// HandlerEvents returns the event names handled by the handler called
	// name, and false if no such handler exists.
	HandlerEvents(name string) (events []string, ok bool)
}

// Load reads path, expands environment variables, decodes strictly, applies
// defaults, validates, and reads token files. Relative file paths in the
// config (token_file, tls.*) are resolved against the directory of path.
// A config with mistakes returns a nil *Config and an *Error listing all of
// them; a file that cannot be read returns the os error, wrapped. A nil handlers skips the
// checks that need the handler catalog (handler names, routed events).
func Load(path string, handlers HandlerCatalog) (*Config, error) {
	return load(path, handlers, os.LookupEnv)
}

func load(path string, handlers HandlerCatalog, lookup func(string) (string, bool)) (*Config, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("error loading config: %w", err)
	}
	return parse(path, data, handlers, parseOptions{baseDir: filepath.Dir(path), lookup: lookup})
}

// Parse does what Load does from data; name (usually the file name) is used
// in messages for mistakes no key can carry, such as a YAML syntax error.
// Relative file paths in the config are resolved against the working
// directory.
func Parse(name string, data []byte, handlers HandlerCatalog) (*Config, error) {
	return parse(name, data, handlers, parseOptions{lookup: os.LookupEnv})
}

type parseOptions struct {
	// baseDir resolves relative file paths; "" leaves them as they are.
	baseDir string
	// lookup reads the environment.
	lookup func(string) (string, bool)
}

func parse(name string, data []byte, handlers HandlerCatalog, opts parseOptions) (*Config, error) {
	ps := newProblems(name)
	var c Config
	set := decodeYAML(ps, data, &c, opts.lookup)
	if ps.bad[""] {
		// Not a YAML mapping: nothing to validate.
		return nil, ps.err()
	}
	isSet := func(path string) bool { return set[path] }
	applyDefaults(&c, isSet)
	v := &validator{c: &c, ps: ps, isSet: isSet, handlers: handlers, baseDir: opts.baseDir}
	v.validate()
	if err := ps.err(); err != nil {
		return nil, err
	}
	return &c, nil
}
