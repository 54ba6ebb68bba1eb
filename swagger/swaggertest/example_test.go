package swaggertest_test

import (
	"testing"

	"github.com/idem-go/idem/swagger"
	"github.com/idem-go/idem/swagger/swaggertest"
)

// An adapter checks that the operations it reports document the covered
// routes of its router and nothing else.
func ExampleDocumented() {
	testOperations := func(t *testing.T) {
		routes := []swaggertest.Route{{Method: "POST", Path: "/orders/:id"}, {Method: "GET", Path: "/orders/:id"}}
		ops := []swagger.Operation{{Method: "POST", Path: "/orders/:id"}} // what the adapter reports
		got := swaggertest.Documented(t, routes, swagger.Options{Operations: ops})
		if !got["POST /orders/{id}"] || got["GET /orders/{id}"] {
			t.Errorf("documented %v", got)
		}
	}
	_ = testOperations
}

func TestDocumented(t *testing.T) {
	routes := []swaggertest.Route{{Method: "POST", Path: "/orders/:id"}, {Method: "GET", Path: "/orders/:id"}, {Method: "PUT", Path: "/items"}}
	got := swaggertest.Documented(t, routes, swagger.Options{Operations: []swagger.Operation{{Method: "POST", Path: "/orders/:id"}}})
	if len(got) != 1 || !got["POST /orders/{id}"] {
		t.Fatalf("documented %v, want only POST /orders/{id}", got)
	}
	if got := swaggertest.Documented(t, routes, swagger.Options{}); len(got) != 2 || !got["PUT /items"] {
		t.Fatalf("without operations, documented %v, want every POST and PUT", got)
	}
}
