// Package swaggertest helps an adapter test the operations it reports for
// the OpenAPI document: it builds a Swagger 2.0 document with one operation
// per route, injects the key header for the adapter's operations, and says
// which operations got it.
package swaggertest

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/idem-go/idem/swagger"
	"github.com/idem-go/idem/swagger/route"
)

// Route is one route of a router's table: a method (set) and a path in
// the router's syntax (/orders/:id).
type Route = route.Operation

// Documented returns the operations ("POST /orders/{id}") that document
// opts' key header once swagger.Inject has run, with opts, over a document
// holding every route of routes.
func Documented(t testing.TB, routes []Route, opts swagger.Options) map[string]bool {
	t.Helper()
	paths := map[string]map[string]any{}
	for _, rt := range routes {
		p := route.Normalize(rt.Path)
		if paths[p] == nil {
			paths[p] = map[string]any{}
		}
		paths[p][strings.ToLower(rt.Method)] = map[string]any{"responses": map[string]any{"200": map[string]any{"description": "OK"}}}
	}
	doc, err := json.Marshal(map[string]any{"swagger": "2.0", "info": map[string]any{"title": "t", "version": "1"}, "paths": paths})
	if err != nil {
		t.Fatal(err)
	}
	if doc, err = swagger.Inject(doc, opts); err != nil {
		t.Fatal(err)
	}
	var out struct {
		Paths map[string]map[string]struct {
			Parameters []struct{ Name, In string }
		}
	}
	if err := json.Unmarshal(doc, &out); err != nil {
		t.Fatal(err)
	}
	header := opts.KeyHeader
	if header == "" {
		header = "Idempotency-Key"
	}
	documented := map[string]bool{}
	for p, item := range out.Paths {
		for m, op := range item {
			for _, prm := range op.Parameters {
				if prm.In == "header" && strings.EqualFold(prm.Name, header) {
					documented[strings.ToUpper(m)+" "+p] = true
				}
			}
		}
	}
	return documented
}
