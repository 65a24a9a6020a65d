package procgroup

import (
	"strings"
	"sync"
)

// Buffer collects the output of a group's processes: an io.Writer that
// several goroutines may write at once (a Spec's Stdout and Stderr are
// written line by line from one goroutine per process), read whole with
// String. Tests use it to look at what the processes printed.
type Buffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Buffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *Buffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
