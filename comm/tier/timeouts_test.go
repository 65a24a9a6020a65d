package tier_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hiercomm/hiercomm/comm/tier"
)

// Each zero field takes its default, the FailureTimeout the medium's;
// a field set stays as it is.
func TestTimeoutsDefaultPerMedium(t *testing.T) {
	for _, tc := range []struct {
		in   tier.Timeouts
		m    tier.Medium
		want tier.Timeouts
	}{
		{tier.Timeouts{}, tier.Network, tier.Timeouts{Timeout: 10 * time.Minute, FailureTimeout: 10 * time.Second, ConnectTimeout: time.Minute}},
		{tier.Timeouts{}, tier.SharedMemory, tier.Timeouts{Timeout: 10 * time.Minute, FailureTimeout: 5 * time.Second, ConnectTimeout: time.Minute}},
		{tier.Timeouts{FailureTimeout: time.Second}, tier.SharedMemory, tier.Timeouts{Timeout: 10 * time.Minute, FailureTimeout: time.Second, ConnectTimeout: time.Minute}},
		{tier.Timeouts{Timeout: 3 * time.Second, ConnectTimeout: 7 * time.Second}, tier.Network, tier.Timeouts{Timeout: 3 * time.Second, FailureTimeout: 10 * time.Second, ConnectTimeout: 7 * time.Second}},
	} {
		if got := tc.in.WithDefaults(tc.m); got != tc.want {
			t.Errorf("%+v.WithDefaults(%v) = %+v, want %+v", tc.in, tc.m, got, tc.want)
		}
	}
}

// A negative field is an error that names it; zero and positive ones are
// not.
func TestTimeoutsValidateNamesTheNegativeField(t *testing.T) {
	for _, tc := range []struct {
		in   tier.Timeouts
		want string
	}{
		{tier.Timeouts{}, ""},
		{tier.Timeouts{Timeout: time.Second, FailureTimeout: time.Second, ConnectTimeout: time.Second}, ""},
		{tier.Timeouts{Timeout: -time.Second}, "Timeout -1s is negative"},
		{tier.Timeouts{FailureTimeout: -time.Millisecond}, "FailureTimeout -1ms is negative"},
		{tier.Timeouts{ConnectTimeout: -time.Minute}, "ConnectTimeout -1m0s is negative"},
	} {
		err := tc.in.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: %v, want no error", tc.in, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: %v, want an error saying %q", tc.in, err, tc.want)
		}
	}
}

func TestTimeoutsString(t *testing.T) {
	got := tier.DefaultTimeouts(tier.SharedMemory).String()
	if want := "operation 10m0s, failure 5s, connect 1m0s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
