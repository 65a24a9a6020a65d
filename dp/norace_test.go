//go:build !race

package dp_test

// raceEnabled says the tests run under the race detector (race_test.go).
const raceEnabled = false
