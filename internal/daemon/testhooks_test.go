//go:build !platformd_testhooks

package daemon

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// A build without tag platformd_testhooks (every shipped binary) has no
// self-kill hook, even with its variable set.
func TestShippedBuildIgnoresKillAfterConfirm(t *testing.T) {
	t.Setenv(TestOutboxKillAfterConfirmEnv, "1")
	require.Nil(t, killAfterConfirm(slog.New(slog.DiscardHandler)))
}
