package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHolderPID reads the process id out of a lease holder's name
// ("<host>:<pid>:<random>"; a host name may hold colons).
func TestHolderPID(t *testing.T) {
	t.Parallel()
	require.Equal(t, 28657, holderPID("vm:28657:0db1af29"))
	require.Equal(t, 42, holderPID("fe80::1:42:abcd"))
	require.Equal(t, -1, holderPID("no-pid"))
	require.Equal(t, -1, holderPID("vm:x:0db1af29"))
}
