package sqlhandler

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func names(ps []Param) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

// What is a parameter and what is not: the rewrite is exact, and an @name
// in a literal, an identifier, a comment or a dollar-quoted string, or an
// @ that belongs to an operator, stays text.
func TestParseRewrites(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, sql string
		params         []string
	}{
		{"each parameter with its type",
			`INSERT INTO t VALUES (@event_id, @event_name, @occurred_at, @payload, @attempt, @routing_key)`,
			`INSERT INTO t VALUES (($1::uuid), ($2::text), ($3::timestamptz), ($4::jsonb), ($5::int), ($6::text))`,
			[]string{"event_id", "event_name", "occurred_at", "payload", "attempt", "routing_key"}},
		{"numbered by first use, reused",
			`SELECT @payload->>'a', @event_id, @payload->>'b'`,
			`SELECT ($1::jsonb)->>'a', ($2::uuid), ($1::jsonb)->>'b'`,
			[]string{"payload", "event_id"}},
		{"string literal", `SELECT '@payload', @attempt`, `SELECT '@payload', ($1::int)`, []string{"attempt"}},
		{"doubled quote", `SELECT 'it''s @payload', @attempt`, `SELECT 'it''s @payload', ($1::int)`, []string{"attempt"}},
		{"backslash is literal in a standard string", `SELECT 'a\', @attempt`, `SELECT 'a\', ($1::int)`, []string{"attempt"}},
		{"escape string", `SELECT E'it\'s @payload', e'\\', @attempt`, `SELECT E'it\'s @payload', e'\\', ($1::int)`, []string{"attempt"}},
		{"unicode string", `SELECT U&'d\0061t @payload', @attempt`, `SELECT U&'d\0061t @payload', ($1::int)`, []string{"attempt"}},
		{"quoted identifier", `SELECT "@payload", "a""@event_id" FROM t`, `SELECT "@payload", "a""@event_id" FROM t`, nil},
		{"line comment", "SELECT 1 -- @payload\n, @attempt", "SELECT 1 -- @payload\n, ($1::int)", []string{"attempt"}},
		{"nested block comment", `/* a /* @payload */ @payload */ SELECT @attempt`, `/* a /* @payload */ @payload */ SELECT ($1::int)`, []string{"attempt"}},
		{"dollar quotes", `SELECT $$ @payload $$, $fn$ @x '$$ $fn$, $a$ $b$ @payload $b$ $a$, @attempt`,
			`SELECT $$ @payload $$, $fn$ @x '$$ $fn$, $a$ $b$ @payload $b$ $a$, ($1::int)`, []string{"attempt"}},
		{"identifier with a dollar", `SELECT a$b, x$1, @attempt FROM t`, `SELECT a$b, x$1, ($1::int) FROM t`, []string{"attempt"}},
		{"jsonb operators", `SELECT @payload @> '{"a":1}', '{}' <@ @payload, ts @@ q, '{}' <@tags`,
			`SELECT ($1::jsonb) @> '{"a":1}', '{}' <@ ($1::jsonb), ts @@ q, '{}' <@tags`, []string{"payload"}},
		{"abs operator", `SELECT @ -5, @5, @attempt`, `SELECT @ -5, @5, ($1::int)`, []string{"attempt"}},
		{"a comment splits an operator", `SELECT 1 =/**/@attempt`, `SELECT 1 =/**/($1::int)`, []string{"attempt"}},
		{"casts and subscripts", `SELECT @payload::text, @payload['lines'][0]`, `SELECT ($1::jsonb)::text, ($1::jsonb)['lines'][0]`, []string{"payload"}},
		{"trailing semicolon dropped", "SELECT @attempt; -- done\n", "SELECT ($1::int)", []string{"attempt"}},
		{"multibyte text", `SELECT 'é', "ü", @attempt`, `SELECT 'é', "ü", ($1::int)`, []string{"attempt"}},
		{"no parameter", `INSERT INTO commit_log SELECT 'commit'`, `INSERT INTO commit_log SELECT 'commit'`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, err := Parse(tc.src)
			require.NoError(t, err)
			require.Equal(t, tc.sql, s.SQL())
			require.Equal(t, tc.src, s.Source())
			if tc.params == nil {
				require.Empty(t, s.Params())
			} else {
				require.Equal(t, tc.params, names(s.Params()))
			}
		})
	}
}

// What is refused before PostgreSQL sees it, and where.
func TestParseRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, src, msg string
		line, col      int
	}{
		{"unknown parameter", "SELECT 1,\n  @paylod->>'x'", "unknown parameter @paylod; the parameters are @event_id, @event_name, @occurred_at, @payload, @attempt, @routing_key", 2, 3},
		{"parameters are lower case", "SELECT @Payload", "unknown parameter @Payload", 1, 8},
		{"prefix abs of a column", "SELECT @x", "unknown parameter @x", 1, 8},
		{"operator glued to a parameter", "SELECT 1 WHERE x=@attempt", `write a space before @attempt: PostgreSQL reads "=@" as one operator`, 1, 18},
		{"contained-by glued to a parameter", "SELECT '{}' <@@payload", `write a space before @payload: PostgreSQL reads "<@@" as one operator`, 1, 15},
		{"positional parameter", "SELECT $1", "positional parameter $1: use the named parameters", 1, 8},
		{"empty", "", "empty statement", 1, 1},
		{"blank", " \n\t ", "empty statement", 1, 1},
		{"only comments", "-- nothing\n/* here */", "empty statement", 1, 1},
		{"only a semicolon", " ; ", "empty statement", 1, 1},
		{"two statements", "SELECT 1; SELECT 2", "more than one statement", 1, 9},
		{"two semicolons", "SELECT 1;;", "more than one statement", 1, 9},
		{"unterminated string", "SELECT 'abc", "unterminated string literal", 1, 8},
		{"unterminated escape string", `SELECT E'abc\'`, "unterminated string literal", 1, 9},
		{"unterminated identifier", `SELECT "abc`, "unterminated quoted identifier", 1, 8},
		{"unterminated dollar quote", "SELECT $tag$ abc $$", "unterminated dollar-quoted string (no closing $tag$)", 1, 8},
		{"unterminated comment", "SELECT 1 /* a /* b */", "unterminated /* comment", 1, 10},
		{"stray dollar", "SELECT $x", "unexpected $", 1, 8},
		{"commit", "COMMIT", "COMMIT is not allowed in a SQL handler: transaction control", 1, 1},
		{"rollback after a comment", "/* undo */ rollback", "ROLLBACK is not allowed", 1, 1},
		{"begin", "begin", "BEGIN is not allowed", 1, 1},
		{"start transaction", "START TRANSACTION", "START is not allowed", 1, 1},
		{"end", "END", "END is not allowed", 1, 1},
		{"savepoint", "SAVEPOINT a", "SAVEPOINT is not allowed", 1, 1},
		{"release", "RELEASE SAVEPOINT a", "RELEASE is not allowed", 1, 1},
		{"prepare transaction", "PREPARE TRANSACTION 'x'", "PREPARE is not allowed", 1, 1},
		{"isolation", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET is not allowed in a SQL handler: SET changes the transaction (its isolation must stay READ COMMITTED)", 1, 1},
		{"session setting", "set search_path = evil", "SET is not allowed", 1, 1},
		{"reset", "RESET ALL", "RESET is not allowed", 1, 1},
		{"discard", "DISCARD ALL", "DISCARD is not allowed", 1, 1},
		{"deallocate", "DEALLOCATE ALL", "DEALLOCATE is not allowed", 1, 1},
		{"copy", "COPY t FROM STDIN", "COPY is not allowed", 1, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := Parse(tc.src)
			var serr *SyntaxError
			require.ErrorAs(t, err, &serr)
			require.Contains(t, serr.Msg, tc.msg)
			require.Equal(t, []int{tc.line, tc.col}, []int{serr.Line, serr.Column}, "position of %q", err)
		})
	}
}

// PostgreSQL's error position (characters in the rewritten text) maps back
// to the statement as written.
func TestSourcePosition(t *testing.T) {
	t.Parallel()
	src := "INSERT INTO invoice (order_id, opened_at)\nVALUES ((@payload->>'order_id')::uuid, 'é' || @occurred_at, totl)"
	s, err := Parse(src)
	require.NoError(t, err)
	at := func(needle string) int { // 1-based character position in s.sql
		i := strings.Index(s.sql, needle)
		require.GreaterOrEqual(t, i, 0)
		return len([]rune(s.sql[:i])) + 1
	}
	line, col := s.sourcePosition(at("totl"))
	require.Equal(t, []int{2, 61}, []int{line, col})
	line, col = s.sourcePosition(at("$2"))
	require.Equal(t, []int{2, 47}, []int{line, col}, "inside a parameter: its @")
	line, col = s.sourcePosition(at("INSERT"))
	require.Equal(t, []int{1, 1}, []int{line, col})
	line, col = s.sourcePosition(10_000)
	require.Equal(t, 2, line)
	require.Positive(t, col)
}

// Parse never panics and its positions stay within the statement.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"SELECT @payload", "'@x'", `E'\'`, "$$", "$a$ $a$", "/* /* */", "--", "@", "@@", "=@attempt", "$1", ";", "é@payload",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		s, err := Parse(src)
		if err != nil {
			var serr *SyntaxError
			require.ErrorAs(t, err, &serr)
			require.True(t, serr.Offset >= 0 && serr.Offset <= len(src))
			return
		}
		for pos := 1; pos <= len(s.sql)+1; pos++ {
			line, col := s.sourcePosition(pos)
			require.Positive(t, line)
			require.Positive(t, col)
		}
	})
}
