package sqlhandler

// This file holds the statements platformd itself runs for SQL handlers.
// The handlers' own statements come from the config, and their batch form
// (batch.go) is built from them: neither is platformd's to name.

// batchCheckView creates the view a batch form's query is checked
// through, in a transaction always rolled back.
const batchCheckView = `CREATE TEMPORARY VIEW "platformd batch check" AS `

// batchCheckDeps lists what the check view depends on beyond what the
// batch form may read. PostgreSQL records no dependency on its own
// (pinned) objects: what the view depends on is the database's own, but
// enumerations and platform.uuid_v7() (platformd's migrations: it reads no
// table).
const batchCheckDeps = `SELECT coalesce(string_agg(DISTINCT pg_catalog.pg_describe_object(d.refclassid, d.refobjid, 0), ', '), '')
FROM pg_catalog.pg_depend d JOIN pg_catalog.pg_rewrite r ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = r.oid
WHERE r.ev_class = '"platformd batch check"'::pg_catalog.regclass AND d.refobjid <> r.ev_class
  AND NOT (d.refclassid = 'pg_catalog.pg_type'::pg_catalog.regclass
    AND EXISTS (SELECT FROM pg_catalog.pg_type ty WHERE ty.oid = d.refobjid AND ty.typtype = 'e'))
  AND NOT (d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass
    AND d.refobjid = pg_catalog.to_regprocedure('platform.uuid_v7()'))`
