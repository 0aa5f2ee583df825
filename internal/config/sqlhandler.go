package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"

	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/token"
)

// SQLStatement is one statement of a SQL handler. Unlike every other
// string of the config it is taken as written: ${VAR} is not expanded and
// $$ stays $$, so that dollar-quoted strings mean what they mean to
// PostgreSQL (and the SQL text depends on the file alone).
type SQLStatement string

// SQLHandlerConfig is a handler declared as SQL statements
// (services[].sql_handlers[]), run by the release binary with no Go code.
// Its statements run in order, for each new event of a batch, inside the
// batch's transaction, with the named parameters of package sqlhandler.
type SQLHandlerConfig struct {
	// Name is the handler's name (^[a-z0-9][a-z0-9_.-]*$), unique across
	// the config and distinct from every registered Go handler: pools
	// reference both kinds alike.
	Name string `yaml:"name"`
	// Events are the event names the handler handles (at least one).
	Events []string `yaml:"events"`
	// SQL holds the statements, one per entry (at least one).
	SQL []SQLStatement `yaml:"sql"`

	// keyPath is "services[i].sql_handlers[j]", set by validation.
	keyPath string
}

// KeyPath returns the handler's key path in the config, e.g.
// "services[0].sql_handlers[1]", for messages about it (such as a
// statement that does not prepare: KeyPath() + ".sql[0]").
func (h SQLHandlerConfig) KeyPath() string { return h.keyPath }

// Statements returns the statements as strings.
func (h SQLHandlerConfig) Statements() []string {
	out := make([]string, len(h.SQL))
	for i, s := range h.SQL {
		out[i] = string(s)
	}
	return out
}

// SQLChecker is implemented by a HandlerCatalog that can also check SQL
// handler statements (the daemon's does, with package sqlhandler's
// tokeniser: unknown parameters, empty statements, transaction control).
// Load then reports each statement it refuses at the statement's key path,
// e.g. "services[0].sql_handlers[1].sql[0]". Without it Load does not look
// inside statements.
type SQLChecker interface {
	// CheckSQL returns why statement cannot be a SQL handler's statement,
	// or nil.
	CheckSQL(statement string) error
}

var sqlStatementType = reflect.TypeFor[SQLStatement]()

// decodeSQLStatement decodes a string scalar into v without expanding it.
// A statement of several lines must be a literal block (`|`): a plain,
// quoted or folded (`>`) scalar joins its lines with spaces, and a `--`
// comment on one line would then swallow the rest of the statement (a
// DELETE's WHERE, an INSERT's ON CONFLICT) and still prepare.
func (d *decoder) decodeSQLStatement(path string, n ast.Node, v reflect.Value) {
	const block = "a statement of several lines must be a literal block scalar (`|`): this style joins its lines, and a `--` comment would swallow the rest"
	switch s := n.(type) {
	case *ast.StringNode:
		if strings.Contains(strings.TrimRight(s.Token.Origin, " \t\r\n"), "\n") {
			d.ps.decodeErr(path, block)
			return
		}
		v.SetString(s.Value)
	case *ast.LiteralNode:
		if s.Start.Type == token.FoldedType {
			d.ps.decodeErr(path, block)
			return
		}
		v.SetString(s.Value.Value)
	default:
		d.ps.decodeErr(path, "must be a string (a SQL statement; a block scalar `|` suits several lines)")
		return
	}
	d.set[path] = true
}

// handlerNameRE is consumer.Registry's rule for handler names: a SQL
// handler becomes a registration.
var handlerNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]*$`)

// sqlHandlerRef locates a SQL handler for cross-references.
type sqlHandlerRef struct {
	service int
	path    string
	events  []string
}

// sqlCatalog adds the config's SQL handlers to the Go handler catalog, so
// that pools reference both kinds alike. With no Go catalog, names that are
// not SQL handlers are not checked.
type sqlCatalog struct {
	sql  map[string]sqlHandlerRef
	next HandlerCatalog
}

// HandlerEvents implements HandlerCatalog.
func (c sqlCatalog) HandlerEvents(name string) ([]string, bool) {
	if r, ok := c.sql[name]; ok {
		return r.events, true
	}
	if c.next == nil {
		return nil, true
	}
	return c.next.HandlerEvents(name)
}

// sqlHandlers checks every service's migrations and SQL handlers, and makes
// the SQL handlers known to the pools' handler checks that follow.
func (v *validator) sqlHandlers() {
	refs := map[string]sqlHandlerRef{}
	for i := range v.c.Services {
		s := &v.c.Services[i]
		sp := servicePath(i)
		v.serviceMigrations(sp, s)
		for j := range s.SQLHandlers {
			h := &s.SQLHandlers[j]
			h.keyPath = fmt.Sprintf("%s.sql_handlers[%d]", sp, j)
			v.sqlHandler(i, h, refs)
		}
		for j := range s.RemoteHandlers {
			h := &s.RemoteHandlers[j]
			h.keyPath = fmt.Sprintf("%s.remote_handlers[%d]", sp, j)
			v.remoteHandler(i, h, refs)
		}
	}
	if len(refs) == 0 {
		return
	}
	// A pool runs against its own service's database, where only that
	// service's migrations and SQL handlers were prepared.
	for i, s := range v.c.Services {
		for j, p := range s.Pools {
			for k, name := range p.Handlers {
				if r, ok := refs[name]; ok && r.service != i {
					kind := "SQL handler"
					if strings.Contains(r.path, ".remote_handlers[") {
						kind = "remote handler"
					}
					v.ps.add(fmt.Sprintf("%s.handlers[%d]", poolPath(i, j), k),
						"%s %q belongs to service %q (%s): a pool runs only its own service's %ss",
						kind, name, v.c.Services[r.service].Name, r.path, kind)
				}
			}
		}
	}
	v.handlers = sqlCatalog{sql: refs, next: v.handlers}
}

// serviceMigrations resolves and checks the service's migrations folder.
func (v *validator) serviceMigrations(sp string, s *ServiceConfig) {
	p := sp + ".migrations"
	if s.Migrations == "" {
		if v.isSet(p) {
			v.ps.add(p, "must not be empty (omit the key for none)")
		}
		return
	}
	s.Migrations = v.resolvePath(s.Migrations)
	fi, err := os.Stat(s.Migrations)
	switch {
	case errors.Is(err, os.ErrNotExist):
		v.ps.add(p, "folder %q does not exist", s.Migrations)
		return
	case err != nil:
		v.ps.add(p, "%v", err)
		return
	case !fi.IsDir():
		v.ps.add(p, "%q is not a folder of goose SQL files", s.Migrations)
		return
	}
	files, err := filepath.Glob(filepath.Join(s.Migrations, "*.sql"))
	if err != nil || len(files) == 0 {
		v.ps.add(p, "no goose SQL files (NNN_name.sql) in %q", s.Migrations)
	}
}

// sqlHandler checks one SQL handler and records it in refs.
func (v *validator) sqlHandler(i int, h *SQLHandlerConfig, refs map[string]sqlHandlerRef) {
	hp := h.keyPath
	nameOK := v.handlerName(hp, h.Name, refs)
	events := v.handlerEvents(hp, h.Events)

	if len(h.SQL) == 0 {
		v.ps.add(hp+".sql", "at least one statement is required")
	}
	checker, _ := v.handlers.(SQLChecker)
	for k, stmt := range h.SQL {
		sp := fmt.Sprintf("%s.sql[%d]", hp, k)
		switch {
		case strings.TrimSpace(string(stmt)) == "":
			v.ps.add(sp, "empty statement")
		case checker != nil:
			if err := checker.CheckSQL(string(stmt)); err != nil {
				v.ps.add(sp, "%v", err)
			}
		}
	}
	if nameOK {
		refs[h.Name] = sqlHandlerRef{service: i, path: hp, events: events}
	}
}

// checkEventName returns why ev cannot be an event name, or "". Event
// names are routing keys matched exactly: words separated by dots, no
// wildcard.
func checkEventName(ev string) string {
	if strings.ContainsAny(ev, "*#") {
		return fmt.Sprintf("invalid event name %q: an event name is matched exactly; wildcards belong in the pool's bindings", ev)
	}
	if msg := checkBinding(ev); msg != "" {
		return strings.Replace(msg, "binding", "event name", 1)
	}
	return ""
}
