//go:build race

package core_test

// raceAllocs is what the race detector adds to the allocations of one
// request (context timers and sync bookkeeping); see alloc_test.go.
const raceAllocs = 2
