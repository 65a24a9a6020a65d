//go:build race

package nccl_test

const raceEnabled = true
