//go:build !race

package nccl_test

const raceEnabled = false
