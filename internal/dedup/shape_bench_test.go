package dedup_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/platformd/platformd/internal/dedup"
	"github.com/platformd/platformd/internal/procstat"
	"github.com/platformd/platformd/internal/testdb"
)

var (
	shapesRounds = flag.Int("shapes.rounds", 1, "BenchmarkDedupRowShapes: interleaved rounds of every case")
	shapesWarm   = flag.Int("shapes.warm", 20_000, "BenchmarkDedupRowShapes: rows recorded in each table before measuring")
	shapesOnly   = flag.String("shapes.only", "", "BenchmarkDedupRowShapes: comma-separated cases to run (default all)")
)

// shapeCase is one table shape and dedup statement.
type shapeCase struct {
	name string
	ddl  string
	stmt string
}

const stmtUnnest = `INSERT INTO processed_event (event_id, processed_at)
SELECT unnest($1::uuid[]), now() ON CONFLICT (event_id) DO NOTHING RETURNING event_id`

const stmtNoConflict = `INSERT INTO processed_event (event_id, processed_at)
SELECT DISTINCT id, now() FROM unnest($1::uuid[]) id WHERE NOT EXISTS (SELECT 1 FROM processed_event p WHERE p.event_id = id) RETURNING event_id`

// stmtCopy marks the COPY case: the ids are copied into a temporary table
// (ON COMMIT DELETE ROWS), then merged with ON CONFLICT DO NOTHING.
const stmtCopy = `INSERT INTO processed_event (event_id, processed_at)
SELECT id, now() FROM dedup_ids ON CONFLICT (event_id) DO NOTHING RETURNING event_id`

// partDDL is a daily-partitioned table, 14 days back and 7 ahead.
func partDDL() string {
	var sb strings.Builder
	sb.WriteString(`CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL) PARTITION BY RANGE (event_id);`)
	day := time.Now().UTC().Truncate(24 * time.Hour)
	for d := -14; d < 7; d++ {
		lo, hi := day.AddDate(0, 0, d), day.AddDate(0, 0, d+1)
		fmt.Fprintf(&sb, "CREATE TABLE processed_event_%d PARTITION OF processed_event FOR VALUES FROM ('%s') TO ('%s');",
			d+14, dedup.FloorUUID(lo), dedup.FloorUUID(hi))
	}
	return sb.String()
}

// shapeCases are the shapes and statements compared: the contract's table
// with the product's statement (plain) and with variants of it, fillfactor
// 100, no processed_at index (pkonly), a processed_at index for non-v7 ids
// only (partial: what a purge by the ids' time needs), daily partitions,
// INSERT ... WHERE NOT EXISTS without ON CONFLICT, and the statement's
// round trip alone (noop).
func shapeCases() []shapeCase {
	return []shapeCase{
		{"plain", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);
CREATE INDEX ON processed_event (processed_at);`, stmtUnnest},
		{"plain-orderby", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);
CREATE INDEX ON processed_event (processed_at);`, `INSERT INTO processed_event (event_id, processed_at)
SELECT id, now() FROM unnest($1::uuid[]) id ORDER BY id ON CONFLICT (event_id) DO NOTHING RETURNING event_id`},
		{"plain-constraint", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);
CREATE INDEX ON processed_event (processed_at);`, `INSERT INTO processed_event (event_id, processed_at)
SELECT unnest($1::uuid[]), now() ON CONFLICT ON CONSTRAINT processed_event_pkey DO NOTHING RETURNING event_id`},
		{"plain-antijoin", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);
CREATE INDEX ON processed_event (processed_at);`, `INSERT INTO processed_event (event_id, processed_at)
SELECT id, now() FROM unnest($1::uuid[]) id WHERE NOT EXISTS (SELECT 1 FROM processed_event p WHERE p.event_id = id)
ON CONFLICT (event_id) DO NOTHING RETURNING event_id`},
		{"ff100", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY WITH (fillfactor = 100), processed_at timestamptz NOT NULL);
CREATE INDEX ON processed_event (processed_at) WITH (fillfactor = 100);`, stmtUnnest},
		{"pkonly", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);`, stmtUnnest},
		{"partial", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);
CREATE INDEX ON processed_event (processed_at) WHERE (get_byte(uuid_send(event_id), 6) >> 4) <> 7;`, stmtUnnest},
		{"partitioned", partDDL(), stmtUnnest},
		{"noop", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);`, `SELECT unnest($1::uuid[]) LIMIT 90`},
		{"plain-noconflict", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);
CREATE INDEX ON processed_event (processed_at);`, stmtNoConflict},
		{"pkonly-noconflict", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);`, stmtNoConflict},
		{"plain-copy", `CREATE TABLE processed_event (event_id uuid PRIMARY KEY, processed_at timestamptz NOT NULL);
CREATE INDEX ON processed_event (processed_at);`, stmtCopy},
	}
}

// shapeDB is one case's scratch database and the connection (and backend
// pid) it is measured on.
type shapeDB struct {
	c    shapeCase
	db   *pgxpool.Pool
	conn *pgxpool.Conn
	pid  int
	rec  [][16]byte
}

// BenchmarkDedupRowShapes measures the dedup statement per table shape
// and statement variant (docs/performance.md, "The dedup row"): batches of
// 100 v7 ids, 10% of them already recorded, each in its own transaction
// on one connection, the cases interleaved round by round. It reports the
// database backend's CPU per id (utime+stime of the backend, from /proc:
// the server must be on this machine), and the WAL per new row from
// EXPLAIN (ANALYZE, WAL) of one batch in 20 (the statement's own WAL,
// which the server-wide LSN would mix with other databases'). Full run:
// go test ./internal/dedup/ -run '^$' -bench DedupRowShapes -benchtime 2000x
// -args -shapes.rounds 4 -shapes.warm 200000.
func BenchmarkDedupRowShapes(b *testing.B) {
	ctx := context.Background()
	var dbs []*shapeDB
	for _, sc := range shapeCases() {
		if *shapesOnly != "" && !slices.Contains(strings.Split(*shapesOnly, ","), sc.name) {
			continue
		}
		dsn := testdb.New(b, "shape")
		db, err := dedup.Connect(ctx, dsn, dedup.ConnectConfig{MaxConns: 2})
		require.NoError(b, err)
		b.Cleanup(db.Close)
		_, err = db.Exec(ctx, sc.ddl)
		require.NoError(b, err)
		warm(b, db, *shapesWarm)
		conn, err := db.Acquire(ctx)
		require.NoError(b, err)
		b.Cleanup(conn.Release)
		s := &shapeDB{c: sc, db: db, conn: conn}
		if sc.stmt == stmtCopy {
			_, err := conn.Exec(ctx, `CREATE TEMP TABLE dedup_ids (id uuid) ON COMMIT DELETE ROWS`)
			require.NoError(b, err)
		}
		require.NoError(b, conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&s.pid))
		dbs = append(dbs, s)
	}
	for r := range max(*shapesRounds, 1) {
		for k := range dbs {
			s := dbs[(k+r)%len(dbs)]
			b.Run(s.c.name, func(b *testing.B) { benchStmt(b, s) })
		}
	}
}

// warm records n fresh v7 ids, then vacuums and analyzes the table.
func warm(b *testing.B, db *pgxpool.Pool, n int) {
	ctx := context.Background()
	ids := make([][16]byte, 0, 1000)
	for i := 0; i < n; i += 1000 {
		ids = ids[:0]
		for range 1000 {
			ids = append(ids, uuid.Must(uuid.NewV7()))
		}
		_, err := db.Exec(ctx, `INSERT INTO processed_event SELECT unnest($1::uuid[]), now()`, ids)
		require.NoError(b, err)
	}
	_, err := db.Exec(ctx, `VACUUM ANALYZE processed_event`)
	require.NoError(b, err)
}

// benchStmt runs the case's statement over b.N batches.
func benchStmt(b *testing.B, s *shapeDB) {
	ctx := context.Background()
	rows, explained, walBytes, walRows := 0, 0, 0.0, 0.0
	ids := make([][16]byte, 100)
	cpu0 := procstat.Process(s.pid)
	b.ResetTimer()
	n := 0
	for b.Loop() {
		n++
		for i := range ids {
			if len(s.rec) > 100 && rand.IntN(10) == 0 {
				ids[i] = s.rec[rand.IntN(len(s.rec))]
			} else {
				ids[i] = uuid.Must(uuid.NewV7())
				if len(s.rec) < 4096 {
					s.rec = append(s.rec, ids[i])
				} else {
					s.rec[rand.IntN(len(s.rec))] = ids[i]
				}
			}
		}
		slices.SortFunc(ids, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
		err := pgx.BeginFunc(ctx, s.conn, func(tx pgx.Tx) error {
			if n%20 == 0 && s.c.stmt != stmtCopy {
				var plan []map[string]any
				if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, WAL, FORMAT JSON) "+s.c.stmt, ids).Scan(&plan); err != nil {
					return err
				}
				p := plan[0]["Plan"].(map[string]any)
				if w, ok := p["WAL Bytes"].(float64); ok {
					walBytes += w
					walRows += p["Actual Rows"].(float64)
				}
				explained++
				return nil
			}
			var r pgx.Rows
			var err error
			if s.c.stmt == stmtCopy {
				if _, err := tx.CopyFrom(ctx, pgx.Identifier{"dedup_ids"}, []string{"id"}, pgx.CopyFromSlice(len(ids), func(i int) ([]any, error) {
					return []any{ids[i]}, nil
				})); err != nil {
					return err
				}
				r, err = tx.Query(ctx, s.c.stmt)
			} else {
				r, err = tx.Query(ctx, s.c.stmt, ids)
			}
			if err != nil {
				return err
			}
			for r.Next() {
				rows++
			}
			return r.Err()
		})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	cpu := procstat.Process(s.pid) - cpu0
	b.ReportMetric(float64(cpu.Microseconds())/float64(n*100), "dbcpu-µs/id")
	if walRows > 0 {
		b.ReportMetric(walBytes/walRows, "WALB/newrow")
	}
}
