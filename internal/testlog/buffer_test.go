package testlog

import (
	"fmt"
	"sync"
	"testing"
)

func TestBufferTakesConcurrentWriters(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprintf(&b, "line from %d\n", i)
				_ = b.String()
			}
		})
	}
	wg.Wait()
	if n := b.Count("line from"); n != 800 {
		t.Fatalf("%d lines, want 800", n)
	}
}
