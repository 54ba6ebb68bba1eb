//go:build race

package canon

// raceEnabled: the race detector drops some of what sync.Pool is given,
// so allocation counts are not checked.
const raceEnabled = true
