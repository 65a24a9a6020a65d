//go:build race

package dp_test

// raceEnabled says the tests run under the race detector, whose sync.Pool
// drops items at random: allocation counts then vary from run to run.
const raceEnabled = true
