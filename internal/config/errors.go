package config

import (
	"fmt"
	"strings"
)

// Problem is one mistake in a config: the path of the key (e.g.
// "services[0].pools[1].batch.size") and what is wrong with it. A mistake
// that no key can carry (a YAML syntax error) has the config's name as its
// path, followed by ":line:column" when the position is known.
type Problem struct {
	// Path is the key's path, e.g. "services[0].pools[1].batch.size".
	Path string
	// Message says what is wrong, e.g. "unknown key".
	Message string
}

// String returns "<path>: <message>".
func (p Problem) String() string { return p.Path + ": " + p.Message }

// Error is returned by Load and Parse when the config has mistakes. It lists
// every problem found, in document order for decoding problems, then in
// config order for validation problems.
type Error struct {
	Problems []Problem
}

// Error returns one line per problem: "<path>: <message>".
func (e *Error) Error() string {
	if len(e.Problems) == 0 {
		return "invalid configuration"
	}
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// problems collects Problems. Paths where decoding failed are remembered so
// that validation does not pile a second, misleading problem on them.
type problems struct {
	name string // config name, the path of document-level problems
	list []Problem
	bad  map[string]bool
}

func newProblems(name string) *problems {
	return &problems{name: name, bad: make(map[string]bool)}
}

// decodeErr records a decoding problem at path and marks path bad.
func (ps *problems) decodeErr(path, format string, args ...any) {
	ps.bad[path] = true
	if path == "" {
		path = ps.name
	}
	ps.list = append(ps.list, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// add records a validation problem at path, unless path or one of its
// ancestors failed to decode.
func (ps *problems) add(path, format string, args ...any) {
	if ps.isBad(path) {
		return
	}
	ps.list = append(ps.list, Problem{Path: path, Message: fmt.Sprintf(format, args...)})
}

// isBad reports whether path or one of its ancestors failed to decode.
func (ps *problems) isBad(path string) bool {
	for {
		if ps.bad[path] {
			return true
		}
		i := strings.LastIndexAny(path, ".[")
		if i <= 0 {
			return ps.bad[""]
		}
		path = path[:i]
	}
}

// badUnder reports whether path, an ancestor or a descendant of it failed
// to decode.
func (ps *problems) badUnder(path string) bool {
	if ps.isBad(path) {
		return true
	}
	for p := range ps.bad {
		if strings.HasPrefix(p, path+".") || strings.HasPrefix(p, path+"[") {
			return true
		}
	}
	return false
}

func (ps *problems) err() error {
	if len(ps.list) == 0 {
		return nil
	}
	return &Error{Problems: ps.list}
}
