// Package tenants holds the many-tenants proofs of docs/tenants.md: one
// daemon hosting many services, each on its own database of one server,
// each checked by the exactly-once checker (package exactly).
// TestManyTenants runs only when PLATFORMD_TENANTS is set (make tenants): it
// creates that many databases and holds up to about 1.5 connections per
// service, which a shared CI server cannot spare beside other tests.
// TestPoolerExactlyOnce hosts the same fleet through a real PgBouncer
// (make pooler: 20 services; make tenants: PLATFORMD_TENANTS), two services
// where PgBouncer is installed and nothing says how many.
package tenants
