// Package tenants holds the many-tenants proof of docs/tenants.md: one
// daemon hosting many services, each on its own database of one server.
// Its test runs only when PLATFORMD_TENANTS is set (make tenants): it
// creates that many databases and holds up to about 1.5 connections per
// service, which a shared CI server cannot spare beside other tests.
package tenants
