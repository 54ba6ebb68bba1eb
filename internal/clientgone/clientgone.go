// Package clientgone is what a capture writer does once a write to its
// client has failed, for core's capture writer and ginidem's: it sends
// nothing more, and a handler's writes report success while the body is
// still stored whole, so that a handler that stops at its first failed
// write (io.Copy, a template) has its whole response stored, not one cut
// short that the client's retry would get as if whole. Past
// MaxStoredBodyBytes, whose body is not stored, they fail, so that a
// handler that writes until its client goes away still ends.
package clientgone

import "errors"

// ErrGone is a write's error once the client has gone away and the body is
// past what is stored.
var ErrGone = errors.New("idem: a write to the client failed: the response is no longer sent")

// State records whether a write to the client has failed; the zero value
// is a client still there.
type State struct{ gone bool }

// Sending reports whether writes still go to the client.
func (s *State) Sending() bool { return !s.gone }

// Wrote returns what a handler's write of n bytes reports once passed on
// to the client, which answered err (nil if not sent); stored is false once
// the body is past MaxStoredBodyBytes.
func (s *State) Wrote(n int, err error, stored bool) (int, error) {
	if err != nil {
		s.gone = true
	}
	if s.gone && !stored {
		return 0, ErrGone
	}
	return n, nil
}
