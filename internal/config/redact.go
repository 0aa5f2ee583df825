package config

import (
	"net/url"
	"strings"
)

// redactedPassword replaces passwords in RedactURL's output.
const redactedPassword = "xxxxx"

// RedactURL returns s, a PostgreSQL DSN or an AMQP URL, with any password
// replaced by "xxxxx", for logs and messages. It handles the URL form
// (scheme://user:password@host/..., and password or sslpassword query
// parameters) and the key=value form (password=... or password='...').
// It is best effort on malformed input and errs on the side of hiding more.
func RedactURL(s string) string {
	if strings.Contains(s, "://") {
		return redactURLForm(s)
	}
	return redactKeyValue(s)
}

func redactURLForm(s string) string {
	i := strings.Index(s, "://")
	scheme, rest := s[:i+3], s[i+3:]

	// Userinfo: up to the last '@' before the path, query or fragment. A
	// password with an unescaped '/', '?' or '#' is caught by the fallback:
	// everything from the first ':' of the user part to the last '@'.
	var userinfo, hostAndRest string
	if end := strings.IndexAny(rest, "/?#"); end >= 0 && strings.Contains(rest[:end], "@") {
		at := strings.LastIndex(rest[:end], "@")
		userinfo, hostAndRest = rest[:at], rest[at:]
	} else if colon, at := strings.IndexByte(rest, ':'), strings.LastIndex(rest, "@"); colon >= 0 && at > colon &&
		!strings.ContainsAny(rest[:colon], "@/?#") {
		userinfo, hostAndRest = rest[:at], rest[at:]
	} else {
		hostAndRest = rest
	}
	if user, _, hasPassword := strings.Cut(userinfo, ":"); hasPassword {
		userinfo = user + ":" + redactedPassword
	}

	// Query parameters named password or sslpassword.
	base, query, hasQuery := strings.Cut(hostAndRest, "?")
	if hasQuery {
		query, fragment, hasFragment := strings.Cut(query, "#")
		params := strings.Split(query, "&")
		for k, p := range params {
			key, _, hasValue := strings.Cut(p, "=")
			if hasValue && isPasswordKey(key) {
				params[k] = key + "=" + redactedPassword
			}
		}
		base += "?" + strings.Join(params, "&")
		if hasFragment {
			base += "#" + fragment
		}
	}
	return scheme + userinfo + base
}

func isPasswordKey(key string) bool {
	if k, err := url.QueryUnescape(key); err == nil {
		key = k
	}
	key = strings.ToLower(strings.TrimSpace(key))
	return key == "password" || key == "sslpassword"
}

// redactKeyValue redacts a libpq key=value connection string: keys and
// values separated by whitespace, values optionally single-quoted with
// backslash escapes, whitespace allowed around '='.
func redactKeyValue(s string) string {
	var b strings.Builder
	i := 0
	for i < len(s) {
		// Copy whitespace.
		for i < len(s) && isSpace(s[i]) {
			b.WriteByte(s[i])
			i++
		}
		if i >= len(s) {
			break
		}
		// Key.
		start := i
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		key := s[start:i]
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			// Not key=value: copy what was read and go on.
			b.WriteString(s[start:i])
			continue
		}
		i++ // '='
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		// Value.
		vstart := i
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i+1, len(s)) // closing quote
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		if isPasswordKey(key) {
			b.WriteString(key + "=" + redactedPassword)
		} else {
			b.WriteString(s[start:vstart])
			b.WriteString(s[vstart:i])
		}
	}
	return b.String()
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}
