//go:build !race

package core_test

const raceAllocs = 0
