// Package sqlhandler runs handlers declared in the configuration as SQL
// statements (`services[].sql_handlers`), for services whose consumers are
// not written in Go.
//
// A statement names the event's fields as parameters: @event_id (uuid),
// @event_name (text), @occurred_at (timestamptz), @payload (jsonb),
// @attempt (int), @routing_key (text) and @traceparent (text: the delivery
// span's W3C traceparent, NULL when the event has no span context). Parse
// tokenises the statement as PostgreSQL's lexer does and rewrites each
// parameter as ($n::type), so an @name inside a string literal, a quoted
// identifier, a comment or a dollar-quoted string is left alone, and so
// are the @>, <@ and @@ operators. The SQL text comes from the
// configuration only: every value from a message is a bound parameter,
// never SQL text.
//
// At start, Prepare has PostgreSQL parse and describe every statement on
// the service database (nothing runs), so that a statement naming a
// missing table or column fails `migrate` and `run` with its position
// (*PrepareError) instead of failing its first event.
//
// A Handler is a consumer.BatchHandler. HandleBatch runs the batch's new
// events in one of two ways:
//   - a handler whose only statement is an INSERT of a query's rows, and
//     which Prepare found safe to (batch.go says when), runs that statement
//     once for the whole batch, over the events unnest'ed from one array
//     per parameter, in delivery order;
//   - any other sends every statement of every event, event by event in
//     order, as one pipeline: one round trip.
//
// When one fails the transaction is aborted; the dedup step replays the
// batch event by event through Handle, each event in a savepoint, exactly
// as for Go handlers. An error of SQLSTATE class 22 (data exception: "abc"
// cast to numeric, a scalar where an array is expected) or 23 (integrity
// constraint) comes from the event's content and is permanent; any other
// is retried. Errors are *StatementError ("statement N: SQLSTATE
// message"); the worker names the handler.
package sqlhandler
