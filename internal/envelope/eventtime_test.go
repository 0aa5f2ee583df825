package envelope

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// An event's age is judged by its UUID v7 time, which the producer set
// when it wrote the event; occurred_at counts only for other ids.
func TestEventTime(t *testing.T) {
	t.Parallel()
	occurred := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	v7 := uuid.Must(uuid.NewV7())
	got := EventTime(v7, occurred)
	require.WithinDuration(t, time.Now(), got, time.Minute, "a v7 id's own time")
	require.Equal(t, occurred, EventTime(uuid.New(), occurred), "a v4 id: occurred_at")
	require.Equal(t, occurred, EventTime(uuid.Nil, occurred), "no id: occurred_at")
}
