package config

import (
	"fmt"
	"strings"
)

// expand replaces ${VAR} and ${VAR:-default} in s with values from lookup,
// and $$ with a literal $. A $ followed by anything else is kept as is.
// ${VAR:-default} uses default when VAR is unset or empty, as the shell
// does. It reports whether s held at least one reference, and one message
// per problem (an unset variable without default, a malformed reference).
func expand(s string, lookup func(string) (string, bool)) (out string, refs bool, problems []string) {
	if !strings.Contains(s, "$") {
		return s, false, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '$' || i+1 >= len(s) {
			b.WriteByte(c)
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
		case '{':
			end := strings.IndexByte(s[i+2:], '}')
			if end < 0 {
				problems = append(problems, fmt.Sprintf("unterminated variable reference %q", s[i:]))
				return "", true, problems
			}
			ref := s[i+2 : i+2+end]
			i += 2 + end
			refs = true
			name, def, hasDefault := strings.Cut(ref, ":-")
			if !validVarName(name) {
				problems = append(problems, fmt.Sprintf("invalid variable reference %q (want ${NAME} or ${NAME:-default})", "${"+ref+"}"))
				continue
			}
			val, ok := lookup(name)
			switch {
			case hasDefault && val == "":
				b.WriteString(def)
			case ok:
				b.WriteString(val)
			default:
				problems = append(problems, fmt.Sprintf("environment variable %q is not set", name))
			}
		default:
			b.WriteByte(c)
		}
	}
	if len(problems) > 0 {
		return "", refs, problems
	}
	return b.String(), refs, nil
}

// validVarName reports whether name is a shell variable name.
func validVarName(name string) bool {
	if name == "" {
		return false
	}
	for i, r := range name {
		switch {
		case r == '_', r >= 'A' && r <= 'Z', r >= 'a' && r <= 'z':
		case r >= '0' && r <= '9' && i > 0:
		default:
			return false
		}
	}
	return true
}
