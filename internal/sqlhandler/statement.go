package sqlhandler

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Param is one named parameter a statement may use, written @Name in the
// SQL and bound with Type.
type Param struct {
	// Name is the parameter's name without the @.
	Name string
	// Type is the PostgreSQL type the value is bound with.
	Type string
}

// param identifies a Param by its index in params.
type param uint8

// The parameters, in the order of params.
const (
	paramEventID param = iota
	paramEventName
	paramOccurredAt
	paramPayload
	paramAttempt
	paramRoutingKey
	paramTraceParent
	// paramArg is a remote handler's argument (ParseRemote): bound as
	// text from the handler's answer, named in Statement.argNames.
	paramArg param = 255
)

// params are the named parameters of the contract (docs/hosting.md).
var params = [...]Param{
	paramEventID:    {Name: "event_id", Type: "uuid"},
	paramEventName:  {Name: "event_name", Type: "text"},
	paramOccurredAt: {Name: "occurred_at", Type: "timestamptz"},
	paramPayload:    {Name: "payload", Type: "jsonb"},
	paramAttempt:    {Name: "attempt", Type: "int"},
	paramRoutingKey: {Name: "routing_key", Type: "text"},
	// traceparent is the W3C traceparent of the delivery's span, NULL when
	// tracing is off: for platform.publish's headers, so that the message
	// joins the event's trace as a Go handler's does (an addition to
	// docs/contracts.md's list).
	paramTraceParent: {Name: "traceparent", Type: "text"},
}

// paramList is "@event_id, @event_name, ..." for messages.
func paramList() string {
	names := make([]string, len(params))
	for i, p := range params {
		names[i] = "@" + p.Name
	}
	return strings.Join(names, ", ")
}

func lookupParam(name string) (param, bool) {
	for i, p := range params {
		if p.Name == name {
			return param(i), true
		}
	}
	return 0, false
}

// refused are the leading keywords of statements a SQL handler must not
// run: they end, split or reconfigure the batch's transaction (whose
// commit is the dedup step's), change the pooled session for every later
// batch, or need a protocol of their own.
var refused = map[string]string{
	"begin":      "transaction control: the statement runs inside the batch's transaction, which platformd commits",
	"start":      "transaction control: the statement runs inside the batch's transaction, which platformd commits",
	"commit":     "transaction control: platformd commits the batch's transaction with its processed_event rows",
	"end":        "transaction control: platformd commits the batch's transaction with its processed_event rows",
	"rollback":   "transaction control: platformd rolls back a failing event itself (savepoints)",
	"abort":      "transaction control: platformd rolls back a failing event itself (savepoints)",
	"savepoint":  "transaction control: platformd isolates each event with savepoints of its own",
	"release":    "transaction control: platformd isolates each event with savepoints of its own",
	"prepare":    "transaction control and prepared statements are platformd's",
	"set":        "SET changes the transaction (its isolation must stay READ COMMITTED) or the pooled session of every later batch",
	"reset":      "RESET changes the pooled session of every later batch",
	"discard":    "DISCARD drops the pooled session's state, prepared statements included",
	"deallocate": "DEALLOCATE drops the pooled session's prepared statements, platformd's own included",
	"copy":       "COPY needs a protocol of its own",
}

// Statement is one SQL handler statement, parsed: its named parameters
// rewritten as positional ones with explicit casts. A Statement is
// immutable and safe for concurrent use.
type Statement struct {
	// source is the statement as written in the config.
	source string
	// sql is what is sent to PostgreSQL: every @name replaced by
	// ($n::type), a trailing semicolon dropped.
	sql string
	// args lists, for $1, $2..., the parameter bound there.
	args []param
	// edits are the replacements made, in order, to map a position in sql
	// back to source.
	edits []edit
	// end is where the statement ends in source (a trailing semicolon and
	// what follows it excluded).
	end int
	// top lists the tokens outside parentheses (keywords, identifiers,
	// dots, opening parentheses), for the shape of batchForm.
	top []token
	// names holds every keyword and identifier, lower-cased (quoted ones
	// as written), for batchForm.
	names map[string]bool
	// argNames names, for $1, $2..., the remote handler's argument bound
	// there ("" for an event field); nil for a SQL handler's statement.
	argNames []string
}

// edit is one replacement: out[outAt:outAt+outLen] stands for
// source[srcAt:srcAt+srcLen], the parameter p.
type edit struct {
	outAt, outLen, srcAt, srcLen int
	p                            param
	arg                          string // the argument's name when p is paramArg
}

// token is one token outside parentheses: a lower-cased keyword or
// identifier, a quoted identifier (as written), "." or "(".
type token struct {
	text     string
	quoted   bool
	from, to int // source offsets
}

// SQL returns the statement as sent to PostgreSQL.
func (s *Statement) SQL() string { return s.sql }

// Source returns the statement as written.
func (s *Statement) Source() string { return s.source }

// Params returns the parameters bound to $1, $2... in order.
func (s *Statement) Params() []Param {
	out := make([]Param, len(s.args))
	for i, a := range s.args {
		out[i] = params[a]
	}
	return out
}

// SyntaxError is why a statement was refused before reaching PostgreSQL.
type SyntaxError struct {
	// Offset is the byte offset in the statement the problem starts at.
	Offset int
	// Line and Column (1-based, in characters) locate Offset.
	Line, Column int
	// Msg says what is wrong.
	Msg string
}

// Error returns the message and, for a statement of several lines, where.
func (e *SyntaxError) Error() string {
	if e.Line > 1 || e.Column > 1 {
		return fmt.Sprintf("%s (line %d, column %d)", e.Msg, e.Line, e.Column)
	}
	return e.Msg
}

// lineCol returns the 1-based line and column (in characters) of byte
// offset off in s.
func lineCol(s string, off int) (int, int) {
	off = min(max(off, 0), len(s))
	before := s[:off]
	line := strings.Count(before, "\n") + 1
	col := utf8.RuneCountInString(before[strings.LastIndexByte(before, '\n')+1:]) + 1
	return line, col
}

// Parse tokenises one statement as PostgreSQL's lexer does, so that an
// @name inside a string literal (standard, E” escape, dollar-quoted), a
// quoted identifier or a comment stays text, and rewrites each named
// parameter as ($n::type). An @ that continues an operator (@>, <@, @@)
// is the operator. It refuses an unknown parameter, a positional one ($1),
// an empty statement, several statements, an unterminated literal or
// comment, and the statements in refused.
func Parse(src string) (*Statement, error) {
	return parse(src, false)
}

func parse(src string, remote bool) (*Statement, error) {
	p := parser{src: src, used: map[param]int{}, names: map[string]bool{}, remote: remote}
	if remote {
		p.usedArgs = map[string]int{}
	}
	if err := p.scan(); err != nil {
		return nil, err
	}
	end := len(src)
	if p.end >= 0 {
		end = p.end
	}
	return &Statement{source: src, sql: p.out.String(), args: p.args, edits: p.edits, end: end, top: p.top, names: p.names,
		argNames: p.argNames}, nil
}

// parser is Parse's state.
type parser struct {
	src   string
	i     int
	out   strings.Builder
	used  map[param]int // parameter -> its $n
	args  []param
	edits []edit
	// first is the statement's first token, lower-cased, when it is a
	// keyword or identifier (for refused).
	first string
	// sawToken is set once anything but whitespace and comments is seen.
	sawToken bool
	// end is the offset of a top-level semicolon, or -1.
	end int
	// opRun is set while the previous byte was an operator character:
	// PostgreSQL reads a run of them as one operator.
	opRun bool
	// depth is the parentheses' nesting; top collects the tokens at 0.
	depth int
	top   []token
	names map[string]bool
	// remote is set by ParseRemote: an @name that is no event field is an
	// argument of the handler's answer (usedArgs: name -> its $n).
	remote   bool
	usedArgs map[string]int
	argNames []string
}

func (p *parser) fail(off int, format string, args ...any) error {
	line, col := lineCol(p.src, off)
	return &SyntaxError{Offset: off, Line: line, Column: col, Msg: fmt.Sprintf(format, args...)}
}

// isOpChar reports PostgreSQL's operator characters.
func isOpChar(c byte) bool { return strings.IndexByte("+-*/<>=~!@#%^&|`?", c) >= 0 }

func isIdentStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' || c == '$' }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func (p *parser) scan() error {
	p.end = -1
	s := p.src
	for p.i < len(s) {
		start := p.i
		c := s[p.i]
		if p.end >= 0 && !isSpace(c) && !p.atComment() {
			return p.fail(p.end, "more than one statement: give each its own entry of sql (they run in order)")
		}
		wasOp := p.opRun
		p.opRun = false
		switch {
		case isSpace(c):
			p.i++
		case p.atComment():
			if err := p.comment(); err != nil {
				return err
			}
		case c == '\'':
			p.sawToken = true
			if err := p.quoted('\'', false); err != nil {
				return err
			}
		case c == '"':
			p.sawToken = true
			if err := p.quoted('"', false); err != nil {
				return err
			}
			p.topToken(s[start:p.i], true, start)
			p.names[strings.ReplaceAll(s[start+1:p.i-1], `""`, `"`)] = true
		case c == '$':
			p.sawToken = true
			if err := p.dollar(); err != nil {
				return err
			}
		case c == '@' && p.i+1 < len(s) && isIdentStart(s[p.i+1]):
			p.sawToken = true
			if err := p.param(wasOp); err != nil {
				return err
			}
			continue // the parameter was written out
		case isIdentStart(c):
			for p.i < len(s) && isIdentChar(s[p.i]) {
				p.i++
			}
			word := s[start:p.i]
			if (word == "e" || word == "E") && p.i < len(s) && s[p.i] == '\'' {
				// E'...' is a string with backslash escapes.
				p.sawToken = true
				if err := p.quoted('\'', true); err != nil {
					return err
				}
				break
			}
			if !p.sawToken {
				p.first = strings.ToLower(word)
			}
			p.sawToken = true
			p.topToken(strings.ToLower(word), false, start)
			p.names[strings.ToLower(word)] = true
		case c == ';':
			p.end = p.i
			p.i++
			continue // not written: a trailing semicolon is dropped
		case isOpChar(c):
			p.sawToken = true
			p.i++
			p.opRun = true
		default:
			p.sawToken = true
			p.i++
			switch c {
			case '(':
				p.topToken("(", false, start)
				p.depth++
			case ')':
				p.depth--
			case '.':
				p.topToken(".", false, start)
			}
		}
		if p.end < 0 {
			p.out.WriteString(s[start:p.i])
		}
	}
	if !p.sawToken {
		return p.fail(0, "empty statement")
	}
	if why, ok := refused[p.first]; ok {
		return p.fail(0, "%s is not allowed in a SQL handler: %s", strings.ToUpper(p.first), why)
	}
	return nil
}

// topToken records a token that ends at p.i if it is outside parentheses.
func (p *parser) topToken(text string, quoted bool, from int) {
	if p.depth == 0 {
		p.top = append(p.top, token{text: text, quoted: quoted, from: from, to: p.i})
	}
}

// atComment reports whether a comment starts at p.i.
func (p *parser) atComment() bool {
	s := p.src[p.i:]
	return strings.HasPrefix(s, "--") || strings.HasPrefix(s, "/*")
}

// comment skips a -- or (nested) /* */ comment.
func (p *parser) comment() error {
	s := p.src
	if s[p.i+1] == '-' {
		if nl := strings.IndexByte(s[p.i:], '\n'); nl >= 0 {
			p.i += nl
		} else {
			p.i = len(s)
		}
		return nil
	}
	start, depth := p.i, 0
	for p.i < len(s) {
		switch {
		case strings.HasPrefix(s[p.i:], "/*"):
			depth++
			p.i += 2
		case strings.HasPrefix(s[p.i:], "*/"):
			depth--
			p.i += 2
			if depth == 0 {
				return nil
			}
		default:
			p.i++
		}
	}
	return p.fail(start, "unterminated /* comment")
}

// quoted skips a literal or identifier delimited by q, a doubled q
// standing for itself; with backslash, a backslash escapes the next byte.
func (p *parser) quoted(q byte, backslash bool) error {
	s := p.src
	start := p.i
	p.i++
	for p.i < len(s) {
		switch c := s[p.i]; {
		case backslash && c == '\\':
			p.i += 2
		case c == q && p.i+1 < len(s) && s[p.i+1] == q:
			p.i += 2
		case c == q:
			p.i++
			return nil
		default:
			p.i++
		}
	}
	if q == '"' {
		return p.fail(start, "unterminated quoted identifier")
	}
	return p.fail(start, "unterminated string literal")
}

// dollar skips a dollar-quoted string ($$...$$, $tag$...$tag$) and refuses
// a positional parameter.
func (p *parser) dollar() error {
	s := p.src
	start := p.i
	j := p.i + 1
	if j < len(s) && s[j] >= '0' && s[j] <= '9' {
		k := j
		for k < len(s) && s[k] >= '0' && s[k] <= '9' {
			k++
		}
		return p.fail(start, "positional parameter %s: use the named parameters (%s)", s[start:k], paramList())
	}
	if j < len(s) && isIdentStart(s[j]) {
		for j < len(s) && isIdentChar(s[j]) && s[j] != '$' {
			j++
		}
	}
	if j >= len(s) || s[j] != '$' {
		return p.fail(start, "unexpected $: a dollar-quoted string is $$...$$ or $tag$...$tag$")
	}
	tag := s[start : j+1]
	end := strings.Index(s[j+1:], tag)
	if end < 0 {
		return p.fail(start, "unterminated dollar-quoted string (no closing %s)", tag)
	}
	p.i = j + 1 + end + len(tag)
	return nil
}

// param rewrites @name, which starts at p.i. afterOp is set when the @
// continues a run of operator characters.
func (p *parser) param(afterOp bool) error {
	s := p.src
	start := p.i
	j := p.i + 1
	for j < len(s) && isIdentChar(s[j]) && s[j] != '$' {
		j++
	}
	name := s[start+1 : j]
	id, known := lookupParam(name)
	if afterOp {
		// PostgreSQL reads "=@x" or "<@x" as the operator "=@" or "<@"
		// followed by x: the @ is the operator's.
		if known {
			op := start
			for op > 0 && isOpChar(s[op-1]) {
				op--
			}
			return p.fail(start, "write a space before @%s: PostgreSQL reads %q as one operator", name, s[op:start+1])
		}
		p.out.WriteString(s[start:j])
		p.i = j
		return nil
	}
	if !known && p.remote {
		p.arg(start, j, name)
		return nil
	}
	if !known {
		return p.fail(start, "unknown parameter @%s; the parameters are %s", name, paramList())
	}
	n, ok := p.used[id]
	if !ok {
		p.args = append(p.args, id)
		if p.remote {
			p.argNames = append(p.argNames, "")
		}
		n = len(p.args)
		p.used[id] = n
	}
	repl := "($" + strconv.Itoa(n) + "::" + params[id].Type + ")"
	p.edits = append(p.edits, edit{outAt: p.out.Len(), outLen: len(repl), srcAt: start, srcLen: j - start, p: id})
	p.out.WriteString(repl)
	p.i = j
	return nil
}

// sourcePosition maps a 1-based character position in s.sql (PostgreSQL's
// error position) to the line and column of the source.
func (s *Statement) sourcePosition(pos int) (line, col int) {
	// Character position -> byte offset in sql.
	off := 0
	for n := 1; n < pos && off < len(s.sql); n++ {
		_, size := utf8.DecodeRuneInString(s.sql[off:])
		off += size
	}
	// Byte offset in sql -> byte offset in source.
	shift := 0
	for _, e := range s.edits {
		if off < e.outAt {
			break
		}
		if off < e.outAt+e.outLen {
			return lineCol(s.source, e.srcAt) // inside a parameter: its @
		}
		shift = e.outAt + e.outLen - (e.srcAt + e.srcLen)
	}
	return lineCol(s.source, off-shift)
}
