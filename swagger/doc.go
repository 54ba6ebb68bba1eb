// Package swagger documents idem in API descriptions: every covered
// operation of a Swagger 2.0 (swag) or OpenAPI 3 document gets
//
//   - the key header parameter (Idempotency-Key, or the Engine's KeyHeader):
//     a string of at most MaxKeyLength characters, required exactly when the
//     Engine requires a key;
//   - the 400, 409 (with Retry-After), 413 and 422 responses, and the 503
//     (with Retry-After) of a fail-closed Engine (Options.FailClosed), whose
//     body is an application/problem+json problem details object
//     (ProblemSchema);
//   - the X-Idempotency-Replay header on the responses it documents whose
//     status the Engine stores (Options.Storable: 2xx, and 4xx but 408, 425
//     and 429, by default), which a retry may get replayed.
//
// swag has no annotation that puts a header on every operation; this
// package fills that gap. It changes nothing that is already there: an
// operation that documents the header by hand (matched case-insensitively,
// also through a path-level or $ref parameter) keeps its own, and
// hand-written 400, 409, 413, 422 and 503 responses are kept. Running it again
// changes nothing, and the order of the document's keys is kept.
//
// Which operations are covered: those whose method is in Options.Methods
// and, if Options.Operations is set, that are listed there. The net/http
// middleware is given its list by hand; each framework adapter builds it
// from its router's route table, for the routes its middleware covers.
// Routes are full paths in any router's syntax (route.Normalize); they are
// matched against the document's paths joined to its basePath (Swagger 2.0)
// or to the path of its first server (OpenAPI 3).
//
// # A swag spec at run time
//
// swag's generated docs.go registers a *swag.Spec whose SwaggerTemplate is
// rendered on every request. Rewrite it once, before serving:
//
//	eng, _ := core.New(core.Config{Required: true})
//	opts := swagger.OptionsFor(eng.Config(),
//		swagger.Operation{Method: "POST", Path: "/api/v1/orders"})
//	opts.BasePath = docs.SwaggerInfo.BasePath // the template holds {{.BasePath}}
//	tmpl, err := swagger.InjectTemplate(docs.SwaggerInfo.SwaggerTemplate, opts)
//	if err != nil {
//		log.Fatal(err)
//	}
//	docs.SwaggerInfo.SwaggerTemplate = tmpl
//
// # swagger.json and swagger.yaml after swag init
//
// The idemswag command rewrites the files swag wrote, in place:
//
//	//go:generate swag init
//	//go:generate go run github.com/idem-go/idem/swagger/cmd/idemswag -dir docs -required -op "POST /api/v1/orders"
//
// It does not touch docs/docs.go, whose template InjectTemplate edits at
// run time. Inject does the same on any document held in memory.
//
// # OpenAPI 3
//
// Inject takes an OpenAPI 3 document as JSON or YAML and returns it in the
// same format. This package does not import kin-openapi; with it, go
// through JSON:
//
//	data, err := json.Marshal(doc) // doc is a *openapi3.T
//	...
//	data, err = swagger.Inject(data, swagger.OptionsFor(eng.Config()))
//	...
//	doc, err = openapi3.NewLoader().LoadFromData(data)
//
// # Output
//
// JSON keeps the indentation of its input (swag's four spaces, or none for
// compact JSON) and its key order. YAML keeps its key order and comments
// but is written by gopkg.in/yaml.v3 with a two-space indent, so the first
// rewrite of a swag YAML file also indents its sequences by two spaces; later
// rewrites change nothing. YAML anchors and aliases are refused in covered
// operations, whose edits would leak to every alias.
package swagger
