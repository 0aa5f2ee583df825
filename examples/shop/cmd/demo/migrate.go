package main

// This file migrates the shop's databases: `shopd migrate` for the
// platform's tables and the consumers' own, and goose for the order
// service's orders table, which no handler of the daemon carries.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"

	"github.com/platformd/platformd/examples/shop"
)

// orderVersionTable versions the order service's migrations apart from
// the platform's, in the platform schema `shopd migrate` creates.
const orderVersionTable = "platform.goose_order"

// migrateOrders applies the order service's migrations
// (examples/shop/migrations/order) to dsn.
func migrateOrders(ctx context.Context, dsn string) error {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return fmt.Errorf("migrate the order database: %w", err)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	store, err := database.NewStore(database.DialectPostgres, orderVersionTable)
	if err != nil {
		return fmt.Errorf("migrate the order database: %w", err)
	}
	p, err := goose.NewProvider("", db, shop.OrderMigrations(), goose.WithStore(store), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return fmt.Errorf("migrate the order database: %w", err)
	}
	if _, err := p.Up(ctx); err != nil {
		return fmt.Errorf("migrate the order database: %w", err)
	}
	return nil
}
