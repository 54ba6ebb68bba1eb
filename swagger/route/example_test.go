package route_test

import (
	"fmt"

	"github.com/idem-go/idem/swagger/route"
)

func ExampleNormalize() {
	for _, p := range []string{"/orders/:id", "/files/*path", "/files/{path...}", "/orders/{id:[0-9]+}"} {
		fmt.Println(route.Normalize(p))
	}
	// Output:
	// /orders/{id}
	// /files/{path}
	// /files/{path}
	// /orders/{id}
}

// An adapter's Operations lists the routes it covers in one order.
func ExampleSort() {
	ops := route.Sort([]route.Operation{{Method: "PUT", Path: "/orders/{id}"}, {Method: "POST", Path: "/orders"}, {Method: "POST", Path: "/orders"}})
	fmt.Println(ops)
	// Output:
	// [{POST /orders} {PUT /orders/{id}}]
}
