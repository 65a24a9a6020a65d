//go:build !race

package nexar_test

const raceEnabled = false
