// Package swagger documents idem in API descriptions. Every covered
// operation of a Swagger 2.0 (swag) or OpenAPI 3 document gets the key
// header parameter (required exactly when the Engine requires a key; its
// maxLength, and a pattern of the printable ASCII it accepts), the
// 400, 409 (with Retry-After), 413, 422 and 503 responses, and the 429 of
// an Engine with a quota, as RFC 9457 problem details (ProblemSchema), and
// the X-Idempotency-Replay and X-Idempotency-Body-Omitted headers on the
// responses whose status the Engine stores.
//
// OptionsFor derives the Options from an Engine's Config. An operation is
// covered when its method is in Options.Methods and, if Options.Operations
// is set, it is listed there (each adapter's Operations lists the routes
// its middleware covers). What the document already says is kept (an
// operation's own response of one of those codes also names idem's
// problem, and the Retry-After of idem's 409, 429 and 503), and a second run changes nothing.
//
// InjectTemplate rewrites a swag docs.go template once, before serving
// (ExampleInjectTemplate); Inject rewrites a JSON or YAML document (Example);
// the idemswag command rewrites the files swag init wrote. OpenAPI 3 through
// kin-openapi, and the output's format, are in [docs/design.md], "swagger".
//
// [docs/design.md]: https://github.com/idem-go/idem/blob/main/docs/design.md
package swagger
