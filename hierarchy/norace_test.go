//go:build !race

package hierarchy_test

const raceEnabled = false
