package swagger_test

import (
	"encoding/json"
	"fmt"
	"log"
	"maps"
	"slices"
	"strings"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger"
)

// An engine that requires keys documents its header on the routes its
// middleware covers, here as a Gin adapter would report them.
func Example() {
	eng, err := core.New(core.Config{Required: true})
	if err != nil {
		log.Fatal(err)
	}
	doc := []byte(`{
    "swagger": "2.0",
    "basePath": "/api",
    "paths": {
        "/orders": {
            "get": {"responses": {"200": {"description": "OK"}}},
            "post": {"responses": {"201": {"description": "Created"}}}
        }
    }
}`)
	opts := swagger.OptionsFor(eng.Config(), swagger.Operation{Method: "POST", Path: "/api/orders"})
	out, err := swagger.Inject(doc, opts)
	if err != nil {
		log.Fatal(err)
	}
	summarize(out)
	// Output:
	// GET /orders: responses [200]
	// POST /orders: header Idempotency-Key (required: true, maxLength: 255); responses [201 400 409 413 422 503];
	//   201 headers [X-Idempotency-Body-Omitted X-Idempotency-Replay]
}

// A swag docs.go template is rewritten once, before it is served; its
// template actions are kept.
func ExampleInjectTemplate() {
	tmpl := `{
    "schemes": {{ marshal .Schemes }},
    "swagger": "2.0",
    "info": {"title": "{{.Title}}"},
    "basePath": "{{.BasePath}}",
    "paths": {"/orders": {"post": {"responses": {"201": {"description": "Created"}}}}}
}`
	opts := swagger.Options{
		Operations: []swagger.Operation{{Method: "POST", Path: "/v1/orders"}},
		BasePath:   "/v1", // docs.SwaggerInfo.BasePath
	}
	out, err := swagger.InjectTemplate(tmpl, opts)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(strings.Contains(out, `"schemes": {{ marshal .Schemes }},`))
	fmt.Println(strings.Contains(out, `"name": "Idempotency-Key"`))
	// Output:
	// true
	// true
}

// summarize prints what each operation of a Swagger 2.0 document says of
// the key.
func summarize(doc []byte) {
	var d struct {
		Paths map[string]map[string]struct {
			Parameters []map[string]any
			Responses  map[string]struct{ Headers map[string]any }
		}
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		log.Fatal(err)
	}
	for _, p := range slices.Sorted(maps.Keys(d.Paths)) {
		for _, m := range slices.Sorted(maps.Keys(d.Paths[p])) {
			op := d.Paths[p][m]
			fmt.Printf("%s %s: ", strings.ToUpper(m), p)
			for _, param := range op.Parameters {
				fmt.Printf("%s %s (required: %v, maxLength: %v); ", param["in"], param["name"], param["required"], param["maxLength"])
			}
			fmt.Printf("responses %v", slices.Sorted(maps.Keys(op.Responses)))
			if h := op.Responses["201"].Headers; h != nil {
				fmt.Printf(";\n  201 headers %v", slices.Sorted(maps.Keys(h)))
			}
			fmt.Println()
		}
	}
}
