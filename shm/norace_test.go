//go:build !race

package shm

// raceDetector tells the tests to trim their work: under the race
// detector the suites' references and the copies run several times slower.
const raceDetector = false
