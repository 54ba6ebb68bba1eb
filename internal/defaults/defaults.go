// Package defaults holds the defaults of core.Config that other packages of
// this module document or fall back to without an Engine (swagger's
// Options, idemswag's flags); core's godoc states them in prose.
package defaults

import (
	"net/http"
	"time"
)

// Defaults of core.Config.
const (
	KeyHeader    = "Idempotency-Key"
	MaxKeyLength = 255
	MaxBodyBytes = 1 << 20 // 1 MiB
	ResponseTTL  = 24 * time.Hour
)

// Methods returns the methods an Engine covers by default, in a slice of
// the caller's own.
func Methods() []string {
	return []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}
}
