//go:build platformd_testhooks

package daemon

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// A test build (tag platformd_testhooks) arms the hook when its variable
// is set, and only then.
func TestTestBuildArmsKillAfterConfirm(t *testing.T) {
	t.Setenv(TestOutboxKillAfterConfirmEnv, "")
	require.Nil(t, killAfterConfirm(slog.New(slog.DiscardHandler)))
	t.Setenv(TestOutboxKillAfterConfirmEnv, "3")
	require.NotNil(t, killAfterConfirm(slog.New(slog.DiscardHandler)))
}
