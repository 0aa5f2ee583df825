package sqlhandler

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Which statements have a batch form at all (before the database is
// asked), and what it is.
func TestBatchFormShape(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		src, why string // why: "" when there is a batch form
	}{
		{`INSERT INTO reservation (order_id, product_id) SELECT (@payload->>'order_id')::uuid, (l->>'p')::uuid FROM jsonb_array_elements(@payload->'lines') l`, ""},
		{`INSERT INTO t VALUES (@event_id, @attempt)`, ""},
		{`insert into s.t(a) values (@attempt), (@attempt + 1);`, ""},
		{`INSERT INTO "My Schema"."T" (a) (SELECT @attempt)`, ""},
		{`INSERT INTO t (a) WITH x AS (SELECT @attempt AS a) SELECT a FROM x`, ""},
		{`INSERT INTO t VALUES (1)`, "no parameter"},
		{`INSERT INTO t VALUES (@attempt) ON CONFLICT DO NOTHING`, "ON or RETURNING at the top level"},
		{`INSERT INTO t VALUES (@attempt) RETURNING id`, "ON or RETURNING at the top level"},
		{`INSERT INTO t SELECT @attempt FROM a JOIN b ON a.x = b.x`, "ON or RETURNING at the top level"},
		{`WITH x AS (SELECT 1) INSERT INTO t SELECT @attempt FROM x`, "not an INSERT"},
		{`UPDATE t SET a = @attempt`, "not an INSERT"},
		{`INSERT INTO t AS x VALUES (@attempt)`, "not INSERT ... SELECT or VALUES"},
		{`INSERT INTO t DEFAULT VALUES`, "not INSERT ... SELECT or VALUES"},
		{`INSERT INTO t OVERRIDING SYSTEM VALUE SELECT @attempt`, "not INSERT ... SELECT or VALUES"},
		{`INSERT INTO (SELECT 1) VALUES (@attempt)`, "no target table"},
	} {
		s, err := Parse(tc.src)
		require.NoError(t, err, tc.src)
		f, why := newBatchForm(s)
		require.Equal(t, tc.why, why, tc.src)
		if tc.why != "" {
			require.Nil(t, f)
			continue
		}
		require.NotNil(t, f)
		require.True(t, strings.HasPrefix(f.sql, "INSERT INTO "), f.sql)
		require.Contains(t, f.sql, "ROWS FROM (pg_catalog.unnest($1::")
		require.Contains(t, f.sql, `OFFSET 0) AS "platformd rows"`)
		require.NotContains(t, f.sql, "@", "every parameter rewritten")
		require.NotContains(t, f.check, "$1")
	}
	s, _ := Parse(`INSERT INTO "My Schema"."T" (a, b) SELECT @payload->>'a', @attempt FROM x`)
	f, _ := newBatchForm(s)
	require.True(t, strings.HasPrefix(f.sql, `INSERT INTO "My Schema"."T" (a, b) `+"\nSELECT \"platformd rows\".* FROM ROWS FROM (pg_catalog.unnest($1::jsonb[]), pg_catalog.unnest($2::int[])) AS \"platformd event\"(payload, attempt)"), f.sql)
	require.Contains(t, f.sql, `SELECT ("platformd event".payload)->>'a', ("platformd event".attempt) FROM x`)
	require.Contains(t, f.sql, `c.oid = '"My Schema"."T"'::pg_catalog.regclass`)
}
