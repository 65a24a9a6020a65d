package comm

import (
	"errors"
	"fmt"
	"testing"
)

// A mapped Work is done exactly when its inner one is, reports the
// inner error through the map, and cannot be completed by itself.
func TestWorkMap(t *testing.T) {
	inner := NewWork()
	calls := 0
	m := inner.Map(func(err error) error {
		calls++
		if err == nil {
			return nil
		}
		return fmt.Errorf("via the part: %w", err)
	})
	m.Complete(errors.New("not mine to complete"))
	if done, _ := m.Test(); done {
		t.Fatal("a mapped Work was done before its inner one")
	}
	if calls != 0 {
		t.Fatalf("the map ran %d times before the inner Work was done", calls)
	}
	cause := errors.New("peer 2 died")
	inner.Complete(cause)
	done, err := m.Test()
	if !done || !errors.Is(err, cause) || err.Error() != "via the part: peer 2 died" {
		t.Fatalf("Test: done %v, err %v; want done with the mapped cause", done, err)
	}
	if err := m.Wait(); !errors.Is(err, cause) {
		t.Fatalf("Wait: %v", err)
	}
	select {
	case <-m.Done():
	default:
		t.Fatal("Done is not closed")
	}

	ok := Succeeded().Map(func(err error) error { return err })
	if err := ok.Wait(); err != nil {
		t.Fatalf("a mapped success: %v", err)
	}
}
