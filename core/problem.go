package core

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Problem type URIs, one per error case, stable across releases so that
// clients can branch on them: docs/problems.md, whose sections they name.
const (
	problemMissingKey       = "https://github.com/idem-go/idem/blob/main/docs/problems.md#missing-key"
	problemInvalidKey       = "https://github.com/idem-go/idem/blob/main/docs/problems.md#invalid-key"
	problemKeyInFlight      = "https://github.com/idem-go/idem/blob/main/docs/problems.md#key-in-flight"
	problemKeyReused        = "https://github.com/idem-go/idem/blob/main/docs/problems.md#key-reused"
	problemBodyTooLarge     = "https://github.com/idem-go/idem/blob/main/docs/problems.md#body-too-large"
	problemUnreadableBody   = "https://github.com/idem-go/idem/blob/main/docs/problems.md#unreadable-body"
	problemBodyConsumed     = "https://github.com/idem-go/idem/blob/main/docs/problems.md#body-consumed"
	problemStoreUnavailable = "https://github.com/idem-go/idem/blob/main/docs/problems.md#store-unavailable"
	problemQuotaExceeded    = "https://github.com/idem-go/idem/blob/main/docs/problems.md#quota-exceeded"
	problemMiddlewareTwice  = "https://github.com/idem-go/idem/blob/main/docs/problems.md#middleware-twice"
)

// contentTypeProblem is the media type of every error body (RFC 9457).
const contentTypeProblem = "application/problem+json"

// Problem is an RFC 9457 problem details object: the body of every error
// the Engine answers with, of Content-Type application/problem+json. It
// implements error so adapters can hand it to a framework's error handler.
// Type is stable across releases and ends in the name of its section of
// docs/problems.md ("#key-in-flight"): branch on that.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Error returns the title and the detail.
func (p *Problem) Error() string {
	if p.Detail == "" {
		return p.Title
	}
	return p.Title + ": " + p.Detail
}

// problem is problemResponse with the types and Link of
// Config.ProblemDocsURL.
func (e *Engine) problem(p *Problem, header http.Header) *Response {
	if base := e.cfg.ProblemDocsURL; base != "" {
		p.Type = base + p.Type[strings.IndexByte(p.Type, '#'):]
		if header == nil {
			header = make(http.Header, 2)
		}
		header.Set("Link", "<"+base+`>; rel="describedby"`)
	}
	return problemResponse(p, header)
}

func problemResponse(p *Problem, header http.Header) *Response {
	body, _ := json.Marshal(p) // a struct of strings and an int cannot fail
	if header == nil {
		header = make(http.Header, 1)
	}
	header.Set("Content-Type", contentTypeProblem)
	return &Response{StatusCode: p.Status, Header: header, Body: body, Problem: p}
}
