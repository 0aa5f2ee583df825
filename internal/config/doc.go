// Package config loads and validates the platformd YAML configuration.
//
// Load (or Parse) runs four steps and reports every mistake it finds, each
// with the key's path (e.g. "services[0].pools[1].retry.delays[2]"), so that
// the daemon can refuse to start before it touches the broker or a database:
//
//  1. Decode. The YAML is parsed into its syntax tree and walked against the
//     Config types (by their yaml tags). An unknown key, a value of the
//     wrong type or a malformed duration (Go syntax: "336h", "5ms") is a
//     Problem. Anchors, aliases and merge keys (<<) are supported.
//  2. Expand. Every string scalar has ${VAR} and ${VAR:-default} replaced
//     from the environment while it is decoded, so that a variable's value
//     can never inject YAML structure. $$ is a literal $. ${VAR:-default}
//     uses default when VAR is unset or empty; an unset ${VAR} without a
//     default is a Problem. A reference can also fill a number or a
//     duration ("concurrency: ${POOL_CONCURRENCY:-4}"). Inside a flow
//     collection ({...} or [...]) quote such a value, since braces are YAML
//     syntax there: {token: "${ADMIN_TOKEN}"}. The statements of SQL
//     handlers (SQLStatement) are the one exception: SQL is taken as
//     written, so that $$ stays a dollar quote.
//  3. Defaults. A key that is absent (or null) gets its default; a key that
//     is present keeps its value, even a zero one ("wait: 0s",
//     "delays: []").
//  4. Validate. Values are checked one by one and across the config (unique
//     pool names and queues, handlers known to the HandlerCatalog, handler
//     events routed by the pool's bindings, horizon longer than the retry
//     span, SQL handlers' names, events and, with a catalog that is a
//     SQLChecker, statements...). Token files are read into
//     TokenConfig.Token.
//
// Relative file paths (token_file, tls.*, services[].migrations) are resolved against the directory
// of the config file by Load, and against the working directory by Parse.
package config
