// Package testlog holds what tests use to read a component's logs: a
// Buffer that the component's goroutines write to while the test reads
// it. Test helpers only; product code never imports it.
package testlog

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer is a bytes.Buffer safe for concurrent writers and readers, for
// captured logs (an slog handler's output). Its zero value is ready.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write appends p.
func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Count returns how many times sub was written so far (lines of a log
// that say it, for a sub that occurs once a line).
func (s *Buffer) Count(sub string) int { return strings.Count(s.String(), sub) }
