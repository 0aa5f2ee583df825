package broker

import (
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// UnroutableSuffix ends the names of an events exchange's unroutable
// exchange and queue: for broker.exchange "events", both are named
// "events.unroutable".
const UnroutableSuffix = ".unroutable"

// UnroutableExchange returns the name of the alternate exchange that
// keeps what exchange could not route: exchange + UnroutableSuffix. It is
// named after its events exchange so that two platformd installations on
// one vhost, with different exchanges, never mix their unroutable events.
func UnroutableExchange(exchange string) string { return exchange + UnroutableSuffix }

// UnroutableQueue returns the name of the durable queue bound to
// UnroutableExchange(exchange), where the broker keeps the unroutable
// events until an operator replays them: the same name as the exchange.
func UnroutableQueue(exchange string) string { return exchange + UnroutableSuffix }

// DeclareUnroutable declares, on ch, the unroutable exchange of exchange (a
// durable fanout: every message reaches the queue, with its own routing
// key, the event name, left as it was) and its durable quorum queue, bound
// to it. Every declaration is idempotent; every platformd declares them
// with the same arguments.
//
// They are not set as the events exchange's alternate-exchange argument:
// an exchange's arguments are fixed when it is created, and every later
// declaration must repeat them exactly or fail with 406 PRECONDITION_FAILED
// (the pools' declarations, older daemons', other producers'). The outbox
// relay publishes with mandatory instead and sends what comes back here. An
// operator who wants the broker to do it for every publisher sets a policy
// on the events exchange with alternate-exchange = UnroutableExchange
// (docs/hosting.md).
func DeclareUnroutable(ch *amqp.Channel, exchange string) error {
	ex, q := UnroutableExchange(exchange), UnroutableQueue(exchange)
	if err := ch.ExchangeDeclare(ex, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return fmt.Errorf("declare unroutable exchange %s: %w", ex, err)
	}
	if _, err := ch.QueueDeclare(q, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeQuorum}); err != nil {
		return fmt.Errorf("declare unroutable queue %s: %w", q, err)
	}
	if err := ch.QueueBind(q, "", ex, false, nil); err != nil {
		return fmt.Errorf("bind unroutable queue %s to %s: %w", q, ex, err)
	}
	return nil
}
