package broker

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// A KeptChannel serves the same channel until the broker closes it, then a
// fresh one, set up again: the publisher's confirm mode and the replay's
// transactions rely on a reopened channel being in its mode.
func TestKeptChannelReopensAndSetsUpAgain(t *testing.T) {
	t.Parallel()
	conn, ctx := localConn(t, "test-kept-channel")

	setups := 0
	k := NewKeptChannel(conn, "test", func(ch *amqp.Channel) error {
		setups++
		return ch.Confirm(false)
	})
	defer k.Close()
	first, err := k.Get(ctx)
	require.NoError(t, err)
	again, err := k.Get(ctx)
	require.NoError(t, err)
	require.Same(t, first, again, "an open channel is kept")
	require.Equal(t, 1, setups)

	// A channel-level error (404 on a passive declare) makes the broker
	// close the channel.
	_, err = first.QueueDeclarePassive("platformd.test.no-such-queue", false, false, false, false, nil)
	require.Error(t, err)
	require.Eventually(t, first.IsClosed, 10*time.Second, 10*time.Millisecond)

	fresh, err := k.Get(ctx)
	require.NoError(t, err)
	require.NotSame(t, first, fresh)
	require.Equal(t, 2, setups, "the new channel is set up too")
	// In confirm mode: a publish gets a confirmation.
	dc, err := fresh.PublishWithDeferredConfirmWithContext(ctx, "", "platformd.test.nowhere", false, false, amqp.Publishing{Body: []byte("x")})
	require.NoError(t, err)
	require.NotNil(t, dc, "confirm mode was set on the reopened channel")
	ok, err := dc.WaitContext(ctx)
	require.NoError(t, err)
	require.True(t, ok)

	k.Close()
	require.True(t, fresh.IsClosed())
	reopened, err := k.Get(ctx)
	require.NoError(t, err)
	require.NotSame(t, fresh, reopened)
}

// A setup that fails closes its channel and names the KeptChannel.
func TestKeptChannelSetupError(t *testing.T) {
	t.Parallel()
	conn, ctx := localConn(t, "test-kept-channel-setup")

	refused := errors.New("refused")
	var opened *amqp.Channel
	k := NewKeptChannel(conn, "journal", func(ch *amqp.Channel) error {
		opened = ch
		return refused
	})
	_, err := k.Get(ctx)
	require.ErrorIs(t, err, refused)
	require.EqualError(t, err, "journal: refused")
	require.NotNil(t, opened)
	require.True(t, opened.IsClosed(), "a channel whose setup failed is closed")
}
