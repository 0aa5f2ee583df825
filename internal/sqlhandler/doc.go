// Package sqlhandler runs handlers declared in the configuration as SQL
// statements (`services[].sql_handlers`), for services whose consumers are
// not written in Go.
//
// A statement names the event's fields as parameters: @event_id (uuid),
// @event_name (text), @occurred_at (timestamptz), @payload (jsonb),
// @attempt (int), @routing_key (text) and @traceparent (text: the delivery
// span's W3C traceparent, NULL when tracing is off). Parse tokenises the statement as
// PostgreSQL's lexer does and rewrites each parameter as ($n::type), so an
// @name inside a string literal, a quoted identifier, a comment or a
// dollar-quoted string is left alone, and so are the @>, <@ and @@
// operators. The SQL text comes from the configuration only: every value
// from a message is a bound parameter, never SQL text.
//
// A Handler is a consumer.BatchHandler: the dedup step calls HandleBatch
// with the new events of a batch, and the statements of all of them, event
// by event in order, go to PostgreSQL as one pipeline (one round trip,
// statements prepared once per connection by pgx's statement cache). When
// one fails the dedup step rolls the batch back and replays it event by
// event through Handle, each in a savepoint, exactly as for Go handlers.
// An error of SQLSTATE class 22 (data exception: "abc" cast to numeric, a
// scalar where an array is expected) or 23 (integrity constraint) comes
// from the event's content and is permanent; any other is retried.
package sqlhandler
