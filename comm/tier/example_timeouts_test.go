package tier_test

import (
	"fmt"
	"time"

	"github.com/hiercomm/hiercomm/comm/tier"
)

// A tier fills the timeouts it was given with its medium's defaults: the
// same names, with FailureTimeout's default the medium's.
func ExampleTimeouts_WithDefaults() {
	given := tier.Timeouts{Timeout: time.Minute}
	fmt.Println("network:      ", given.WithDefaults(tier.Network))
	fmt.Println("shared memory:", given.WithDefaults(tier.SharedMemory))
	// Output:
	// network:       operation 1m0s, failure 10s, connect 1m0s
	// shared memory: operation 1m0s, failure 5s, connect 1m0s
}
