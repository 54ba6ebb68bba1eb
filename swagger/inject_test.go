package swagger

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"text/template"

	"go.yaml.in/yaml/v3"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger/route"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

// ginRoutes are the routes a Gin adapter would report for its middleware:
// full paths, Gin syntax. POST /api/v1/reports is not among them.
var ginRoutes = []Operation{
	{Method: "POST", Path: "/api/v1/orders"},
	{Method: "PUT", Path: "/api/v1/orders/:orderID"},
	{Method: "DELETE", Path: "/api/v1/orders/:orderID"},
	{Method: "GET", Path: "/api/v1/orders"}, // listed, but GET is not covered
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from %s (go test -update rewrites it):\n%s", name, path, got)
	}
}

func TestInjectGolden(t *testing.T) {
	t.Parallel()
	required := OptionsFor(core.Config{Required: true, MaxKeyLength: 64, KeyHeader: "Idempotency-Key",
		Methods: []string{"POST", "PUT", "PATCH", "DELETE"}}, ginRoutes...)
	for _, tc := range []struct {
		in   string
		opts Options
	}{
		{"swagger.json", required},
		{"swagger.yaml", required},
		{"openapi.json", Options{}},
		{"openapi.yaml", Options{}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			t.Parallel()
			in, err := os.ReadFile(filepath.Join("testdata", tc.in))
			if err != nil {
				t.Fatal(err)
			}
			out, err := Inject(in, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.in, out)
			again, err := Inject(out, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, out) {
				t.Errorf("a second run changed the document:\n%s", again)
			}
		})
	}
}

// docTemplate returns the docTemplate constant of testdata/docs/docs.go,
// a docs.go as swag init v1.16 writes it.
func docTemplate(t *testing.T) string {
	t.Helper()
	src, err := os.ReadFile("testdata/docs/docs.go")
	if err != nil {
		t.Fatal(err)
	}
	_, tmpl, _ := strings.Cut(string(src), "const docTemplate = `")
	tmpl, _, _ = strings.Cut(tmpl, "`")
	return tmpl
}

// render executes a swag template as swag.ReadDoc does.
func render(t *testing.T, tmpl string) map[string]any {
	t.Helper()
	tpl, err := template.New("swagger").Funcs(template.FuncMap{
		"marshal": func(v any) string { b, _ := json.Marshal(v); return string(b) },
		"escape":  func(v any) string { return strings.ReplaceAll(v.(string), `"`, `\"`) },
	}).Parse(tmpl)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	err = tpl.Execute(&buf, map[string]any{"Schemes": []string{"https"}, "Title": "Orders API",
		"Description": `An "order" API`, "Version": "1.0", "Host": "localhost", "BasePath": "/api/v1"})
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("rendered template: %v\n%s", err, buf.Bytes())
	}
	return doc
}

func TestInjectTemplate(t *testing.T) {
	t.Parallel()
	tmpl := docTemplate(t)
	opts := OptionsFor(core.Config{Required: true, MaxKeyLength: 64, KeyHeader: "Idempotency-Key",
		Methods: []string{"POST", "PUT", "PATCH", "DELETE"}}, ginRoutes...)
	opts.BasePath = "/api/v1" // docs.SwaggerInfo.BasePath
	out, err := InjectTemplate(tmpl, opts)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "docTemplate", []byte(out))
	for _, action := range []string{`"schemes": {{ marshal .Schemes }},`, `"{{escape .Description}}"`,
		`"{{.Title}}"`, `"{{.Version}}"`, `"{{.Host}}"`, `"{{.BasePath}}"`} {
		if !strings.Contains(out, action) {
			t.Errorf("template action %s lost", action)
		}
	}
	again, err := InjectTemplate(out, opts)
	if err != nil {
		t.Fatal(err)
	}
	if again != out {
		t.Error("a second run changed the template")
	}
	doc := render(t, out)
	if s := doc["schemes"].([]any); len(s) != 1 || s[0] != "https" {
		t.Errorf("schemes = %v", s)
	}
	post := doc["paths"].(map[string]any)["/orders"].(map[string]any)["post"].(map[string]any)
	if !hasKeyParam(post) {
		t.Error("rendered template: POST /orders has no key parameter")
	}
}

func TestInjectTemplateUntouched(t *testing.T) {
	t.Parallel()
	tmpl := docTemplate(t)
	out, err := InjectTemplate(tmpl, Options{Operations: []Operation{}})
	if err != nil {
		t.Fatal(err)
	}
	if out != tmpl {
		t.Errorf("a template with no covered operation changed:\n%s", out)
	}
}

// operations decodes a document's paths: path → method → operation.
func operations(t *testing.T, doc []byte) map[string]map[string]map[string]any {
	t.Helper()
	var d struct {
		Paths map[string]map[string]any
	}
	if err := yaml.Unmarshal(doc, &d); err != nil {
		t.Fatal(err)
	}
	paths := make(map[string]map[string]map[string]any)
	for p, item := range d.Paths {
		paths[p] = make(map[string]map[string]any)
		for m, op := range item {
			if op, ok := op.(map[string]any); ok {
				paths[p][m] = op
			}
		}
	}
	return paths
}

func keyParams(op map[string]any) int {
	n := 0
	params, _ := op["parameters"].([]any)
	for _, p := range params {
		p, _ := p.(map[string]any)
		if p["in"] == "header" && strings.EqualFold(p["name"].(string), "Idempotency-Key") {
			n++
		}
	}
	return n
}

func hasKeyParam(op map[string]any) bool { return keyParams(op) > 0 }

func TestOperationFilter(t *testing.T) {
	t.Parallel()
	doc := []byte(`{"swagger": "2.0", "basePath": "/api", "paths": {
		"/orders": {"get": {"responses": {"200": {"description": "OK"}}},
		            "post": {"responses": {"201": {"description": "Created"}}}},
		"/reports": {"post": {"responses": {"201": {"description": "Created"}}}}}}`)
	for _, tc := range []struct {
		name string
		ops  []Operation
	}{
		{"full path", []Operation{{Method: "POST", Path: "/api/orders"}}},
		{"lower-case method", []Operation{{Method: "post", Path: "/api/orders/"}}},
		{"any method", []Operation{{Method: "", Path: "/api/orders"}}},
		{"ServeMux pattern", []Operation{must(route.Parse("POST example.com/api/orders/{$}"))}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := Inject(doc, Options{Operations: tc.ops})
			if err != nil {
				t.Fatal(err)
			}
			ops := operations(t, out)
			if !hasKeyParam(ops["/orders"]["post"]) {
				t.Error("covered POST /orders has no key parameter")
			}
			if _, ok := ops["/orders"]["get"]["parameters"]; ok {
				t.Error("GET /orders was changed")
			}
			if len(ops["/orders"]["get"]["responses"].(map[string]any)) != 1 {
				t.Error("GET /orders responses changed")
			}
			if _, ok := ops["/reports"]["post"]["parameters"]; ok {
				t.Error("POST /reports, not in the list, was changed")
			}
		})
	}

	// Without a list, every operation of a covered method is covered.
	out, err := Inject(doc, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ops := operations(t, out)
	if !hasKeyParam(ops["/orders"]["post"]) || !hasKeyParam(ops["/reports"]["post"]) || hasKeyParam(ops["/orders"]["get"]) {
		t.Errorf("without Operations:\n%s", out)
	}
}

func must(op Operation, err error) Operation {
	if err != nil {
		panic(err)
	}
	return op
}

func TestHandWritten(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc string
	}{
		{"swag annotation", `{"swagger": "2.0", "paths": {"/o": {"post": {
			"parameters": [{"type": "string", "description": "mine", "name": "idempotency-KEY", "in": "header"}],
			"responses": {"201": {"description": "Created"}}}}}}`},
		{"path-level parameter", `{"swagger": "2.0", "paths": {"/o": {
			"parameters": [{"type": "string", "description": "mine", "name": "Idempotency-Key", "in": "header"}],
			"post": {"responses": {"201": {"description": "Created"}}}}}}`},
		{"$ref parameter", `{"openapi": "3.1.0", "paths": {"/o": {"post": {
			"parameters": [{"$ref": "#/components/parameters/Key"}],
			"responses": {"201": {"description": "Created"}}}}},
			"components": {"parameters": {"Key": {"name": "Idempotency-Key", "in": "header", "description": "mine"}}}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := Inject([]byte(tc.doc), Options{})
			if err != nil {
				t.Fatal(err)
			}
			op := operations(t, out)["/o"]["post"]
			if n := keyParams(op); n > 1 || tc.name == "swag annotation" && n != 1 {
				t.Errorf("%d key parameters:\n%s", n, out)
			}
			if strings.Count(string(out), "Idempotency key:") != 0 {
				t.Errorf("a second key parameter was added:\n%s", out)
			}
			// The responses are still added.
			for _, code := range []string{"400", "409", "413", "422"} {
				if _, ok := op["responses"].(map[string]any)[code]; !ok {
					t.Errorf("no %s response", code)
				}
			}
		})
	}
}

// An operation's own response of a code idem answers too (a handler's 400)
// is kept, and says that idem's problem comes with that code as well: a
// second media type in OpenAPI 3, a sentence in Swagger 2.0's description.
// A second run changes nothing.
func TestHandWrittenResponsesKept(t *testing.T) {
	t.Parallel()
	codes := []string{"400", "409", "413", "422"}
	t.Run("swagger 2.0", func(t *testing.T) {
		t.Parallel()
		doc := `{"swagger": "2.0", "paths": {"/o": {"post": {"responses": {
		"201": {"description": "Created", "headers": {"x-idempotency-replay": {"type": "string", "description": "mine"}}},
		"400": {"description": "mine 400", "schema": {"$ref": "#/definitions/Mine"}}, "409": {"description": "mine 409"},
		"413": {"description": "mine 413"}, "422": {"description": "mine 422"}}}}}}`
		out := injectTwice(t, doc)
		resp := operations(t, out)["/o"]["post"]["responses"].(map[string]any)
		for _, code := range codes {
			r := resp[code].(map[string]any)
			d, _ := r["description"].(string)
			if !strings.HasPrefix(d, "mine "+code+". ") || strings.Count(d, "From idem, as application/problem+json ("+ProblemSchema+")") != 1 {
				t.Errorf("%s: description %q", code, d)
			}
			if code == "400" && r["schema"].(map[string]any)["$ref"] != "#/definitions/Mine" {
				t.Errorf("400: schema %v", r["schema"])
			}
		}
		h := resp["201"].(map[string]any)["headers"].(map[string]any)
		if mine, _ := h["x-idempotency-replay"].(map[string]any); len(h) != 2 || mine["description"] != "mine" || h["X-Idempotency-Body-Omitted"] == nil {
			t.Errorf("201 headers: %v; want its own replay header kept, and the body-omitted one", h)
		}
	})
	t.Run("openapi 3", func(t *testing.T) {
		t.Parallel()
		doc := `{"openapi": "3.0.3", "paths": {"/o": {"post": {"responses": {
		"201": {"description": "Created"},
		"400": {"description": "mine 400", "content": {"application/json": {"schema": {"type": "object"}}}},
		"409": {"description": "mine 409"}, "413": {"description": "mine 413"}, "422": {"description": "mine 422"}}}}}}`
		out := injectTwice(t, doc)
		resp := operations(t, out)["/o"]["post"]["responses"].(map[string]any)
		for _, code := range codes {
			r := resp[code].(map[string]any)
			content, _ := r["content"].(map[string]any)
			problem, _ := content["application/problem+json"].(map[string]any)
			if r["description"] != "mine "+code || problem == nil ||
				problem["schema"].(map[string]any)["$ref"] != "#/components/schemas/"+ProblemSchema {
				t.Errorf("%s: %v", code, r)
			}
			if code == "400" && content["application/json"] == nil {
				t.Errorf("400: its own media type is gone: %v", content)
			}
		}
		if !strings.Contains(string(out), `"`+ProblemSchema+`"`) {
			t.Errorf("no %s schema:\n%s", ProblemSchema, out)
		}
	})
}

// An operation's own 409, 429 or 503 also documents the Retry-After that
// idem's problem of that code carries, unless it has one; a second run
// changes nothing.
func TestHandWrittenRetryAfter(t *testing.T) {
	t.Parallel()
	opts := Options{Quota: true, FailClosed: true}
	for _, tc := range []struct{ name, doc, header string }{
		{"swagger 2.0", `{"swagger": "2.0", "paths": {"/o": {"post": {"responses": {"201": {"description": "Created"},
		"409": {"description": "mine 409"}, "429": {"description": "mine 429"},
		"503": {"description": "mine 503", "headers": {"retry-after": {"type": "string", "description": "mine"}}}}}}}}`, "type"},
		{"openapi 3", `{"openapi": "3.0.3", "paths": {"/o": {"post": {"responses": {"201": {"description": "Created"},
		"409": {"description": "mine 409"}, "429": {"description": "mine 429"},
		"503": {"description": "mine 503", "headers": {"retry-after": {"schema": {"type": "string"}, "description": "mine"}}}}}}}}`, "schema"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out, err := Inject([]byte(tc.doc), opts)
			if err != nil {
				t.Fatal(err)
			}
			if again, err := Inject(out, opts); err != nil || string(again) != string(out) {
				t.Fatalf("a second run changed the document (%v):\n%s\n---\n%s", err, out, again)
			}
			resp := operations(t, out)["/o"]["post"]["responses"].(map[string]any)
			for _, code := range []string{"409", "429"} {
				h, _ := resp[code].(map[string]any)["headers"].(map[string]any)
				ra, _ := h["Retry-After"].(map[string]any)
				if ra == nil || ra[tc.header] == nil {
					t.Errorf("%s: headers %v, want Retry-After", code, h)
				}
			}
			if h := resp["503"].(map[string]any)["headers"].(map[string]any); len(h) != 1 || h["retry-after"] == nil {
				t.Errorf("503: headers %v, want its own retry-after alone", h)
			}
		})
	}
}

// Descriptions that are not plain text are handled: null or missing gets
// the sentence alone, a number or an alias is left as it is (an alias's
// anchor may describe an operation not covered), a block scalar is ended
// before the sentence. The output parses, and a second run changes nothing.
func TestAlsoProblemDescriptions(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, doc, want, not string }{
		{"json null", `{"swagger": "2.0", "paths": {"/o": {"post": {"responses": {"400": {"description": null}}}}}}`,
			`"description":"From idem`, ""},
		{"json number", `{"swagger": "2.0", "paths": {"/o": {"post": {"responses": {"400": {"description": 400}}}}}}`,
			`"description":400`, "From idem"},
		{"json missing", `{"swagger": "2.0", "paths": {"/o": {"post": {"responses": {"400": {"schema": {}}}}}}}`,
			`"description":"From idem`, ""},
		{"yaml empty", "swagger: \"2.0\"\npaths:\n  /o:\n    post:\n      responses:\n        \"400\":\n          description:\n",
			"description: 'From idem", "!!null"},
		{"yaml alias", "swagger: \"2.0\"\npaths:\n  /o:\n    get:\n      responses:\n        \"400\":\n          description: &d Bad input\n" +
			"    post:\n      responses:\n        \"400\":\n          description: *d\n", "description: *d", "From idem"},
		{"yaml block", "swagger: \"2.0\"\npaths:\n  /o:\n    post:\n      responses:\n        \"400\":\n          description: |\n            Bad input\n",
			"Bad input. From idem", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			out := injectTwice(t, tc.doc)
			if !strings.Contains(string(out), tc.want) || tc.not != "" && strings.Contains(string(out), tc.not) {
				t.Errorf("want %q and not %q in:\n%s", tc.want, tc.not, out)
			}
			if strings.HasPrefix(tc.name, "json") && !json.Valid(out) {
				t.Errorf("invalid JSON:\n%s", out)
			}
		})
	}
}

// injectTwice injects doc, checks that a second run changes nothing, and
// returns the result.
func injectTwice(t *testing.T, doc string) []byte {
	t.Helper()
	out, err := Inject([]byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	again, err := Inject(out, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if string(again) != string(out) {
		t.Errorf("a second run changed the document:\n%s\n---\n%s", out, again)
	}
	return out
}

func TestOptions(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Required: true, KeyHeader: "X-Request-Key", MaxKeyLength: 40, Methods: []string{"POST"}})
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"openapi": "3.0.0", "paths": {"/o": {"post": {"responses": {}}, "put": {"responses": {}}}}}`
	out, err := Inject([]byte(doc), OptionsFor(eng.Config()))
	if err != nil {
		t.Fatal(err)
	}
	ops := operations(t, out)["/o"]
	if _, ok := ops["put"]["parameters"]; ok {
		t.Error("PUT is not covered by the engine but was changed")
	}
	p := ops["post"]["parameters"].([]any)[0].(map[string]any)
	schema := p["schema"].(map[string]any)
	if p["name"] != "X-Request-Key" || p["required"] != true || schema["maxLength"] != 40 || schema["type"] != "string" {
		t.Errorf("parameter %v", p)
	}
}

// An Engine that covers no method documents no operation.
func TestOptionsNoMethods(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{Methods: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	doc := `{"openapi": "3.0.0", "paths": {"/o": {"post": {"responses": {}}}}}`
	out, err := Inject([]byte(doc), OptionsFor(eng.Config()))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := operations(t, out)["/o"]["post"]["parameters"]; ok {
		t.Error("the Engine covers no method, but POST was documented")
	}
}

// Every Engine answers 503 when its transactional store is busy or a record
// does not decode, one with FailClosed also when its store fails: the 503
// is documented with Retry-After in both formats, and its description says
// whether a store failure is one of its causes.
func TestFailClosed503(t *testing.T) {
	t.Parallel()
	eng, err := core.New(core.Config{FailClosed: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range []string{
		`{"openapi": "3.0.0", "paths": {"/o": {"post": {"responses": {"201": {"description": "ok"}}}}}}`,
		`{"swagger": "2.0", "paths": {"/o": {"post": {"responses": {"201": {"description": "ok"}}}}}}`,
	} {
		for _, failClosed := range []bool{true, false} {
			opts := OptionsFor(eng.Config())
			opts.FailClosed = failClosed
			out, err := Inject([]byte(doc), opts)
			if err != nil {
				t.Fatal(err)
			}
			r, ok := operations(t, out)["/o"]["post"]["responses"].(map[string]any)["503"].(map[string]any)
			if !ok {
				t.Fatalf("FailClosed %v: no 503\n%s", failClosed, out)
			}
			if _, ok := r["headers"].(map[string]any)["Retry-After"]; !ok || !strings.Contains(string(out), ProblemSchema) {
				t.Errorf("503 without Retry-After or the problem schema: %v", r)
			}
			if unavailable := strings.Contains(r["description"].(string), "unavailable"); unavailable != failClosed {
				t.Errorf("FailClosed %v: the 503's description %q", failClosed, r["description"])
			}
		}
	}
}

// An Engine with a Quota answers 429 to a new key over it: OptionsFor
// documents it, with Retry-After; without a quota there is no 429.
func TestQuota429(t *testing.T) {
	t.Parallel()
	for _, q := range []core.Quota{{InFlight: 5}, {}} {
		eng, err := core.New(core.Config{Quota: q})
		if err != nil {
			t.Fatal(err)
		}
		doc := `{"openapi": "3.0.0", "paths": {"/o": {"post": {"responses": {"201": {"description": "ok"}}}}}}`
		out, err := Inject([]byte(doc), OptionsFor(eng.Config()))
		if err != nil {
			t.Fatal(err)
		}
		r, ok := operations(t, out)["/o"]["post"]["responses"].(map[string]any)["429"].(map[string]any)
		if ok != (q.InFlight > 0) {
			t.Fatalf("quota %+v: 429 documented: %v\n%s", q, ok, out)
		}
		if ok {
			if _, retry := r["headers"].(map[string]any)["Retry-After"]; !retry {
				t.Errorf("429 without Retry-After: %v", r)
			}
		}
	}
}

func TestCompactJSON(t *testing.T) {
	t.Parallel()
	// As json.Marshal of a kin-openapi *openapi3.T writes it.
	doc := `{"info":{"title":"t & <co>","version":"1"},"openapi":"3.0.3","paths":{"/o":{"post":{"responses":{"200":{"description":"OK"}}}}}}`
	out, err := Inject([]byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("\n")) || !bytes.Contains(out, []byte(`"t & <co>"`)) {
		t.Errorf("compact JSON not kept compact and unescaped:\n%s", out)
	}
	if !json.Valid(out) {
		t.Errorf("invalid JSON:\n%s", out)
	}
}

func TestErrors(t *testing.T) {
	t.Parallel()
	for _, doc := range []string{
		``,
		`{`,
		`{"swagger": "2.0"} x`,
		`[]`,
		`{"info": {}}`,
		`swagger: "1.2"`,
		`{"swagger": "2.0", "paths": []}`,
		`{"swagger": "2.0", "paths": {"/o": {"post": []}}}`,
		`{"swagger": "2.0", "paths": {"/o": {"post": {"parameters": {}}}}}`,
		`{"swagger": "2.0", "paths": {"/o": {"post": {"responses": []}}}}`,
		"openapi: 3.0.0\npaths:\n  /o:\n    post: &op {responses: {}}\n    put: *op\n",
		"a: [",
	} {
		if _, err := Inject([]byte(doc), Options{}); err == nil || !strings.HasPrefix(err.Error(), "swagger: ") {
			t.Errorf("Inject(%q): err = %v", doc, err)
		}
	}
	if _, err := InjectTemplate(`{"schemes": {{ marshal .Schemes }, "swagger": "2.0"}`, Options{}); err == nil {
		t.Error("unterminated action: no error")
	}
}

func TestNormalizePath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"/orders":                   "/orders",
		"/orders/:id":               "/orders/{id}",
		"/orders/:id/items/:item":   "/orders/{id}/items/{item}",
		"/orders/:id<int>?":         "/orders/{id}",
		"/flights/:from-:to":        "/flights/{from}-{to}",
		"/files/:name.:ext":         "/files/{name}.{ext}",
		"/files/*path":              "/files/{path}",
		"/files/*":                  "/files/{wildcard}",
		"/files/+":                  "/files/{wildcard}",
		"/files/*1":                 "/files/{wildcard}",
		"/files/{path...}":          "/files/{path}",
		"/orders/{$}":               "/orders/",
		"/orders/{id:[0-9]{1,3}}":   "/orders/{id}",
		"/orders/{id}":              "/orders/{id}",
		"example.com/orders/{id}":   "/orders/{id}",
		"/v1/things:batch":          "/v1/things:batch",
		`/v1/\:literal`:             "/v1/:literal",
		"orders":                    "/orders",
		"/a/{unclosed":              "/a/{unclosed",
		"/a/:":                      "/a/:",
		"/api/v1/orders/:orderID/x": "/api/v1/orders/{orderID}/x",
	} {
		if got := route.Normalize(in); got != want {
			t.Errorf("route.Normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParseOperation(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Operation{
		"POST /orders":  {Method: "POST", Path: "/orders"},
		"post\t/orders": {Method: "POST", Path: "/orders"},
		"/orders":       {Method: "", Path: "/orders"},
	} {
		if got, err := route.Parse(in); err != nil || got != want {
			t.Errorf("route.Parse(%q) = %v, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "POST /a /b"} {
		if _, err := route.Parse(in); err == nil {
			t.Errorf("route.Parse(%q): no error", in)
		}
	}
}

func TestProduces(t *testing.T) {
	t.Parallel()
	doc := `{"swagger": "2.0", "produces": ["application/json"], "paths": {"/o": {
		"get": {"responses": {"200": {"description": "OK"}}},
		"post": {"summary": "s", "responses": {"201": {"description": "Created"}}},
		"put": {"produces": ["text/plain"], "responses": {"200": {"description": "OK"}}}}}}`
	var pretty bytes.Buffer // as swag writes it
	if err := json.Indent(&pretty, []byte(doc), "", "    "); err != nil {
		t.Fatal(err)
	}
	out, err := Inject(pretty.Bytes(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	ops := operations(t, out)["/o"]
	for m, want := range map[string][]any{
		"get":  nil,
		"post": {"application/json", "application/problem+json"},
		"put":  {"text/plain", "application/problem+json"},
	} {
		if got, _ := ops[m]["produces"].([]any); !reflect.DeepEqual(got, want) && len(want) > 0 {
			t.Errorf("%s produces %v, want %v", m, got, want)
		} else if len(want) == 0 && got != nil {
			t.Errorf("%s produces %v, want none", m, got)
		}
	}
	if !strings.Contains(string(out), `"produces": [
                    "application/json",
                    "application/problem+json"
                ],
                "summary": "s",`) {
		t.Errorf("produces not put before summary:\n%s", out)
	}
}

func TestYAMLStyle(t *testing.T) {
	t.Parallel()
	doc := "# keep me\nopenapi: 3.1.0\npaths:\n  /o:\n    post: # and me\n      responses:\n        200: {description: ok}\n"
	out, err := Inject([]byte(doc), Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# keep me\n", "post: # and me\n", "        400:\n", "        422:\n"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("no %q in:\n%s", want, out)
		}
	}
}

func TestSortOperations(t *testing.T) {
	ops := []Operation{{Method: "POST", Path: "/b"}, {Method: "PUT", Path: "/a"}, {Method: "POST", Path: "/a"}, {Method: "POST", Path: "/b"}}
	got := route.Sort(ops)
	want := []Operation{{Method: "POST", Path: "/a"}, {Method: "PUT", Path: "/a"}, {Method: "POST", Path: "/b"}}
	if !slices.Equal(got, want) {
		t.Fatalf("SortOperations = %v, want %v", got, want)
	}
}

// The replay header goes on the documented responses the Engine's policy
// stores, which a retry may get back; the 413 names the Engine's limit.
func TestReplayHeaderOnStoredResponses(t *testing.T) {
	t.Parallel()
	doc := `{"swagger": "2.0", "paths": {"/o": {"post": {"responses": {
		"201": {"description": "Created"}, "2XX": {"description": "a range, as OpenAPI 3 allows"},
		"400": {"description": "the app's own"}, "429": {"description": "slow down"},
		"500": {"description": "failed"}, "default": {"description": "other"}}}}}}`
	for name, tc := range map[string]struct {
		cfg  core.Config
		want []string // the responses with the replay header
	}{
		"default policy": {core.Config{MaxBodyBytes: 4096}, []string{"201", "2XX", "400"}},
		"2xx only":       {core.Config{MaxBodyBytes: 4096, Storable: func(s int) bool { return s < 300 }}, []string{"201", "2XX"}},
		"201 only":       {core.Config{MaxBodyBytes: 4096, Storable: func(s int) bool { return s == 201 }}, []string{"201", "2XX"}},
	} {
		eng, err := core.New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		out, err := Inject([]byte(doc), OptionsFor(eng.Config()))
		if err != nil {
			t.Fatal(err)
		}
		resp := operations(t, out)["/o"]["post"]["responses"].(map[string]any)
		var got []string
		for code, r := range resp {
			if h, _ := r.(map[string]any)["headers"].(map[string]any); h[core.HeaderReplay] != nil {
				got = append(got, code)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: replay header on %v, want %v", name, got, tc.want)
		}
		if d, _ := resp["413"].(map[string]any)["description"].(string); !strings.Contains(d, "4096 bytes") {
			t.Errorf("%s: 413 %q does not name the limit", name, d)
		}
	}
}
