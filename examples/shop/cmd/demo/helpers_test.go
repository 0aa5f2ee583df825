package main

// This file holds the tests' own set-up on the shared services: a fresh
// PostgreSQL database per use (CREATE DATABASE, dropped at the end), a
// RabbitMQ vhost, free loopback addresses.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package if a run of the demo leaves a goroutine
// behind (its proxy, its daemon watcher, its connections).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testDatabaseURL is the PostgreSQL the tests create their databases on.
func testDatabaseURL() string {
	if u := os.Getenv("TEST_DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

// newDatabase creates an empty database named after prefix, dropped when
// the test ends, and returns its URL.
func newDatabase(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_" + prefix + "_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, testDatabaseURL())
	require.NoError(t, err, "connect to PostgreSQL")
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0")
	require.NoError(t, err, "create database %s", name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, testDatabaseURL())
		if err != nil {
			return
		}
		defer admin.Close(ctx)
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(testDatabaseURL())
	require.NoError(t, err, "TEST_DATABASE_URL")
	u.Path = "/" + name
	return u.String()
}

// newVhost creates a RabbitMQ vhost of the test's own, deleted at the end,
// and returns the broker URL for it.
func newVhost(t *testing.T, prefix string) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	vhost := prefix + "-" + hex.EncodeToString(b)
	for _, args := range [][]string{{"add_vhost", vhost}, {"set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"}} {
		out, err := exec.Command("rabbitmqctl", args...).CombinedOutput()
		require.NoError(t, err, "rabbitmqctl %v: %s", args, out)
	}
	t.Cleanup(func() { _ = exec.Command("rabbitmqctl", "delete_vhost", vhost).Run() })
	base := "amqp://guest:guest@127.0.0.1:5672/"
	if u := strings.TrimSpace(os.Getenv("TEST_AMQP_URL")); u != "" {
		base = u
	}
	return strings.TrimSuffix(base, "/") + "/" + vhost
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}
