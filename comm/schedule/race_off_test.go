//go:build !race

package schedule

const raceOn = false
