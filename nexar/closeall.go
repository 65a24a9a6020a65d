package nexar

import (
	"errors"
	"sync"
)

// CloseAll closes the communicators of one process's ranks at once. Closing
// a world communicator waits (bounded) for its peers to close too, so
// closing them one after another would wait in turn.
func CloseAll(comms []*Comm) error {
	errs := make([]error, len(comms))
	var wg sync.WaitGroup
	for i, c := range comms {
		if c == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.Close()
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
