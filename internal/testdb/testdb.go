// Package testdb gives tests a scratch PostgreSQL database of their own on
// the server named by TEST_DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres), dropped when the test ends.
// It is for tests only.
package testdb

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/platformd/platformd/internal/testenv"

	"github.com/jackc/pgx/v5"
)

// DefaultURL is the server used when TEST_DATABASE_URL is unset.
const DefaultURL = testenv.DefaultDatabaseURL

// AdminURL returns the DSN of the maintenance database tests create
// scratch databases from.
func AdminURL() string {
	return testenv.DatabaseURL()
}

// New creates an empty database named after prefix plus a random suffix and
// returns its DSN. The database is dropped (forcibly) in t.Cleanup.
func New(t testing.TB, prefix string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := Name(prefix)
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		t.Fatalf("testdb: connect %s: %v", prefix, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0"); err != nil {
		t.Fatalf("testdb: create %s: %v", name, err)
	}
	t.Cleanup(func() { Drop(name) })
	return WithDatabase(AdminURL(), name)
}

// Name returns a fresh lower-case database name starting with prefix.
func Name(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	p := strings.ToLower(strings.NewReplacer("/", "_", "-", "_", " ", "_").Replace(prefix))
	if len(p) > 40 {
		p = p[:40]
	}
	return "t_" + p + "_" + hex.EncodeToString(b)
}

// Drop drops database name, terminating its sessions first.
func Drop(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		return
	}
	defer admin.Close(ctx)
	_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

// WithDatabase returns dsn pointing at database name instead.
func WithDatabase(dsn, name string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic("testdb: TEST_DATABASE_URL must be a URL: " + err.Error())
	}
	u.Path = "/" + name
	return u.String()
}
