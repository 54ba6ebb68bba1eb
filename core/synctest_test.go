package core_test

import "time"

// advance lets d pass on the fake clock of the testing/synctest bubble it
// runs in: the bubble's other goroutines run until they all block, then the
// clock jumps. Call it only inside synctest.Test (outside, it would wait d).
func advance(d time.Duration) { <-time.After(d) }
