package swagger

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger/route"
)

// ProblemSchema is the name of the definition (Swagger 2.0) or component
// schema (OpenAPI 3) of the problem details body of the 400, 409, 413, 422,
// (with Options.Quota) 429 and 503 responses. It is added once, unless the
// document already has one by that name.
const ProblemSchema = "idem.Problem"

const problemJSON = "application/problem+json"

// Inject documents the idempotency key on every covered operation of a
// Swagger 2.0 or OpenAPI 3 document, JSON or YAML, and returns the document
// in the same format. The order of keys is kept; JSON keeps its indentation
// (swag's four spaces, or none), YAML is written with a two-space indent.
// Running it again changes nothing.
func Inject(doc []byte, opts Options) ([]byte, error) {
	if t := bytes.TrimLeft(doc, " \t\r\n\ufeff"); len(t) > 0 && t[0] == '{' {
		root, err := parseJSON(doc)
		if err != nil {
			return nil, err
		}
		if err := inject(root, opts); err != nil {
			return nil, err
		}
		return writeJSON(root, doc)
	}
	var root yaml.Node
	if err := yaml.Unmarshal(doc, &root); err != nil {
		return nil, fmt.Errorf("swagger: invalid YAML: %w", err)
	}
	if root.Kind != yaml.DocumentNode || len(root.Content) != 1 {
		return nil, errors.New("swagger: empty document")
	}
	if err := inject(root.Content[0], opts); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&root); err != nil {
		return nil, fmt.Errorf("swagger: writing YAML: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("swagger: writing YAML: %w", err)
	}
	return buf.Bytes(), nil
}

// InjectTemplate is Inject for the SwaggerTemplate of a swag-generated
// docs.go (a *swag.Spec), to be called once before the spec is served:
//
//	docs.SwaggerInfo.SwaggerTemplate, err = swagger.InjectTemplate(docs.SwaggerInfo.SwaggerTemplate, opts)
//
// The template is JSON whose strings may hold template actions
// ("{{.Title}}"), which are kept as they are; the only action outside a
// string, swag's {{ marshal .Schemes }}, is kept too. Only swag's default
// delimiters {{ and }} are understood.
func InjectTemplate(tmpl string, opts Options) (string, error) {
	doc, actions, err := protectActions(tmpl)
	if err != nil {
		return "", err
	}
	out, err := Inject([]byte(doc), opts)
	if err != nil {
		return "", err
	}
	s := string(out)
	for ph, action := range actions {
		if strings.Count(s, ph) != 1 {
			return "", errors.New("swagger: template action " + action + " lost")
		}
		s = strings.Replace(s, ph, action, 1)
	}
	return s, nil
}

// protectActions replaces every template action outside a JSON string with
// a JSON string holding a placeholder, and returns the placeholders (quoted,
// as they will be written) with their actions.
func protectActions(tmpl string) (string, map[string]string, error) {
	prefix := "idem-swagger-action-"
	for strings.Contains(tmpl, prefix) {
		prefix += "-"
	}
	var b strings.Builder
	actions := make(map[string]string)
	inString := false
	for i := 0; i < len(tmpl); i++ {
		c := tmpl[i]
		switch {
		case inString && c == '\\' && i+1 < len(tmpl):
			b.WriteString(tmpl[i : i+2])
			i++
			continue
		case c == '"':
			inString = !inString
		case !inString && strings.HasPrefix(tmpl[i:], "{{"):
			end := strings.Index(tmpl[i:], "}}")
			if end < 0 {
				return "", nil, errors.New("swagger: unterminated template action")
			}
			ph := strconv.Quote(prefix + strconv.Itoa(len(actions)))
			actions[ph] = tmpl[i : i+end+2]
			b.WriteString(ph)
			i += end + 1
			continue
		}
		b.WriteByte(c)
	}
	return b.String(), actions, nil
}

// injector holds one run of the injection over a document's node tree.
type injector struct {
	opts    Options
	v3      bool
	root    *yaml.Node
	base    string
	methods map[string]bool
	ops     map[string]bool // "METHOD key" or "* key", nil: all
	problem bool            // a response refers to ProblemSchema
}

var operationKeys = map[string]bool{
	"get": true, "put": true, "post": true, "delete": true,
	"options": true, "head": true, "patch": true, "trace": true,
}

func inject(root *yaml.Node, opts Options) error {
	if root.Kind != yaml.MappingNode {
		return errors.New("swagger: the document is not an object")
	}
	in := &injector{opts: opts.filled(), root: root, methods: make(map[string]bool)}
	switch {
	case scalar(get(root, "swagger")) == "2.0":
		in.base = scalar(get(root, "basePath"))
	case strings.HasPrefix(scalar(get(root, "openapi")), "3."):
		in.v3 = true
		in.base = serverPath(get(root, "servers"))
	default:
		return errors.New(`swagger: neither a Swagger 2.0 ("swagger": "2.0") nor an OpenAPI 3 ("openapi": "3.x") document`)
	}
	if strings.Contains(in.base, "{{") {
		in.base = "" // a swag template's {{.BasePath}}
	}
	if in.opts.BasePath != "" {
		in.base = in.opts.BasePath
	}
	for _, m := range in.opts.Methods {
		in.methods[strings.ToUpper(m)] = true
	}
	if in.opts.Operations != nil {
		in.ops = make(map[string]bool, len(in.opts.Operations))
		for _, op := range in.opts.Operations {
			m := strings.ToUpper(op.Method)
			if m == "" {
				m = "*"
			}
			in.ops[m+" "+route.Key(route.Normalize(op.Path))] = true
		}
	}

	paths := get(root, "paths")
	if paths == nil {
		return nil
	}
	if paths.Kind != yaml.MappingNode {
		return errors.New("swagger: paths is not an object")
	}
	for i := 0; i+1 < len(paths.Content); i += 2 {
		p, item := paths.Content[i].Value, deref(paths.Content[i+1])
		if item.Kind != yaml.MappingNode {
			continue // a null path item, or a YAML alias to something else
		}
		for j := 0; j+1 < len(item.Content); j += 2 {
			method := item.Content[j].Value
			if !operationKeys[method] || !in.covers(strings.ToUpper(method), p) {
				continue
			}
			err := editable(paths.Content[i+1])
			if err == nil {
				err = in.operation(item, item.Content[j+1])
			}
			if err != nil {
				return fmt.Errorf("swagger: %s %s: %w", strings.ToUpper(method), p, err)
			}
		}
	}
	if in.problem {
		return in.addProblemSchema()
	}
	return nil
}

func (in *injector) covers(method, p string) bool {
	if !in.methods[method] {
		return false
	}
	if in.ops == nil {
		return true
	}
	k := route.Key(joinBase(in.base, p))
	return in.ops[method+" "+k] || in.ops["* "+k]
}

// operation documents the key on one covered operation.
func (in *injector) operation(item, op *yaml.Node) error {
	if err := editable(op); err != nil {
		return err
	}
	if op.Kind != yaml.MappingNode {
		return errors.New("not an object")
	}
	if !in.hasKeyParam(get(item, "parameters")) && !in.hasKeyParam(get(op, "parameters")) {
		params := get(op, "parameters")
		if params == nil {
			params = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
			insertBefore(op, "parameters", params, "responses")
		}
		if err := editable(params); err != nil {
			return err
		}
		if params.Kind != yaml.SequenceNode {
			return errors.New("parameters is not an array")
		}
		params.Content = append(params.Content, in.keyParam())
	}

	responses := get(op, "responses")
	if responses == nil {
		responses = mapping()
		set(op, "responses", responses)
	}
	if err := editable(responses); err != nil {
		return err
	}
	if responses.Kind != yaml.MappingNode {
		return errors.New("responses is not an object")
	}
	for i := 0; i+1 < len(responses.Content); i += 2 {
		code, resp := responses.Content[i].Value, responses.Content[i+1]
		if !in.stored(code) || resp.Kind != yaml.MappingNode || resp.Anchor != "" ||
			get(resp, "$ref") != nil || in.isProblem(resp) {
			continue // not a response that is stored, one shared with other operations, or idem's own
		}
		headers := get(resp, "headers")
		if headers == nil {
			headers = mapping()
			set(resp, "headers", headers)
		}
		if headers.Kind != yaml.MappingNode || headers.Anchor != "" {
			continue
		}
		if getFold(headers, in.opts.ReplayHeader) == nil {
			set(headers, in.opts.ReplayHeader, in.header("string", `"true" when this response is the stored response of an earlier request `+
				`with the same idempotency key, replayed instead of running the request again.`))
		}
		if getFold(headers, core.HeaderBodyOmitted) == nil {
			set(headers, core.HeaderBodyOmitted, in.header("string", `On a replay whose body was too large to store: "sha256=<hex>; size=<bytes>" `+
				`of the original body, and the replay's body is empty.`))
		}
	}
	var like *yaml.Node // an existing status code key, whose YAML style new ones follow
	for i := 0; i < len(responses.Content) && like == nil; i += 2 {
		if k := responses.Content[i]; len(k.Value) == 3 && k.Value[0] >= '1' && k.Value[0] <= '5' {
			like = k
		}
	}
	added := false
	codes := []string{"400", "409", "413", "422", "503"}
	if in.opts.Quota {
		codes = append(codes, "429")
	}
	for _, code := range codes {
		resp := get(responses, code)
		if resp == nil {
			k := insertSorted(responses, code, in.problemResponse(code))
			if like != nil {
				k.Tag, k.Style = like.Tag, like.Style
			}
			added = true
			continue
		}
		if resp.Kind == yaml.MappingNode && resp.Anchor == "" && get(resp, "$ref") == nil && !in.isProblem(resp) {
			added = in.alsoProblem(resp, code) || added
			in.alsoRetryAfter(resp, code)
		}
	}
	if added && !in.v3 {
		in.produceProblem(op)
	}
	in.problem = in.problem || added
	return nil
}

// stored reports whether the Engine stores a response of this code (a
// final status that the store policy keeps):
// "201", or an OpenAPI 3 range ("2XX") of which it keeps any status.
func (in *injector) stored(code string) bool {
	if len(code) != 3 || code[0] < '2' || code[0] > '5' { // a 1xx is never stored
		return false
	}
	class := int(code[0]-'0') * 100
	if strings.EqualFold(code[1:], "XX") {
		for s := class; s < class+100; s++ {
			if in.opts.Storable(s) {
				return true
			}
		}
		return false
	}
	if code[1] < '0' || code[1] > '9' || code[2] < '0' || code[2] > '9' {
		return false
	}
	return in.opts.Storable(class + int(code[1]-'0')*10 + int(code[2]-'0'))
}

// isProblem reports whether resp is one of idem's problem responses: its
// body is ProblemSchema.
func (in *injector) isProblem(resp *yaml.Node) bool {
	schema := get(resp, "schema")
	ref := "#/definitions/" + ProblemSchema
	if in.v3 {
		schema = get(get(get(resp, "content"), problemJSON), "schema")
		ref = "#/components/schemas/" + ProblemSchema
	}
	return scalar(get(schema, "$ref")) == ref
}

// hasKeyParam reports whether a parameter list has the key header.
func (in *injector) hasKeyParam(params *yaml.Node) bool {
	if params == nil || params.Kind != yaml.SequenceNode {
		return false
	}
	for _, p := range params.Content {
		p = deref(p)
		if ref := scalar(get(p, "$ref")); ref != "" {
			p = in.ref(ref)
		}
		if strings.EqualFold(scalar(get(p, "in")), "header") && strings.EqualFold(scalar(get(p, "name")), in.opts.KeyHeader) {
			return true
		}
	}
	return false
}

// ref resolves a local reference ("#/parameters/Key"), or returns nil.
func (in *injector) ref(ref string) *yaml.Node {
	if !strings.HasPrefix(ref, "#/") {
		return nil
	}
	n := in.root
	for _, name := range strings.Split(ref[2:], "/") {
		name = strings.ReplaceAll(strings.ReplaceAll(name, "~1", "/"), "~0", "~")
		if n = get(n, name); n == nil {
			return nil
		}
	}
	return n
}

// keyPattern is the documented pattern of the key header: printable ASCII
// (0x20 to 0x7E), as the Engine accepts, a quoted key and its parameters
// included (core's parseKey refuses any other byte).
const keyPattern = "^[ -~]+$"

func (in *injector) keyParam() *yaml.Node {
	o := in.opts
	desc := "Idempotency key: a unique value per operation, such as a UUID, sent unchanged with every retry of it. " +
		"The first request with a key runs once and its response is stored; a repeat gets that response back, " +
		"marked " + o.ReplayHeader + ": true, without running again. The same key with a different request is refused " +
		"with 422, and a repeat while the first request is still running with 409 and Retry-After. " +
		"A key is remembered for " + humanDuration(o.ResponseTTL) + " after its response (x-idempotency-ttl-seconds). " +
		"1 to " + strconv.Itoa(o.MaxKeyLength) + " printable ASCII characters."
	if !o.Required {
		desc += " Optional: a request without a key runs unprotected."
	}
	limits := []any{"minLength", integer(1), "pattern", str(keyPattern)}
	if o.MaxKeyLength > 0 {
		limits = []any{"maxLength", integer(o.MaxKeyLength), "minLength", integer(1), "pattern", str(keyPattern)}
	}
	ttl := integer(int(o.ResponseTTL / time.Second))
	if in.v3 {
		return mapping("name", str(o.KeyHeader), "in", str("header"), "description", str(desc),
			"required", boolean(o.Required), "schema", mapping(append([]any{"type", str("string")}, limits...)...),
			"x-idempotency-ttl-seconds", ttl)
	}
	kv := append([]any{"type", str("string")}, limits...)
	return mapping(append(kv, "description", str(desc), "name", str(o.KeyHeader), "in", str("header"),
		"required", boolean(o.Required), "x-idempotency-ttl-seconds", ttl)...)
}

// humanDuration writes d in whole days or hours when it is one ("24 hours").
func humanDuration(d time.Duration) string {
	switch {
	case d >= 48*time.Hour && d%(24*time.Hour) == 0:
		return strconv.Itoa(int(d/(24*time.Hour))) + " days"
	case d > time.Hour && d%time.Hour == 0:
		return strconv.Itoa(int(d/time.Hour)) + " hours"
	}
	return d.String()
}

// header is a response header object of the given type.
func (in *injector) header(typ, desc string) *yaml.Node {
	if in.v3 {
		return mapping("description", str(desc), "schema", mapping("type", str(typ)))
	}
	return mapping("type", str(typ), "description", str(desc))
}

// alsoProblem documents idem's problem beside an operation's own response
// of the same code (a handler's 400 for its own validation): OpenAPI 3 gets
// a second media type, application/problem+json; Swagger 2.0, whose
// response has one schema, a sentence appended to the description. It
// reports whether it added anything.
func (in *injector) alsoProblem(resp *yaml.Node, code string) bool {
	if in.v3 {
		content := get(resp, "content")
		if content == nil {
			content = mapping()
			set(resp, "content", content)
		}
		if content.Kind != yaml.MappingNode || content.Anchor != "" || get(content, problemJSON) != nil {
			return false
		}
		set(content, problemJSON, mapping("schema", mapping("$ref", str("#/components/schemas/"+ProblemSchema))))
		return true
	}
	note := "From idem, as " + problemJSON + " (" + ProblemSchema + "): " + in.problemDescription(code)
	desc := descriptionNode(resp)
	switch {
	case desc == nil:
		return false // an alias, or not text: left as it is
	case strings.Contains(desc.Value, note):
		return false
	}
	d := strings.TrimRight(desc.Value, " \t\r\n")
	if d != "" && !strings.HasSuffix(d, ".") {
		d += "."
	}
	if d != "" {
		d += " "
	}
	for i := 0; i+1 < len(resp.Content); i += 2 {
		if resp.Content[i].Value == "description" {
			resp.Content[i+1] = str(d + note) // a new node: the old one's style (a block scalar) may not fit
			return true
		}
	}
	set(resp, "description", str(d+note))
	return true
}

// alsoRetryAfter documents the Retry-After of idem's 409, 429 and 503 on
// an operation's own response of that code, unless it has one.
func (in *injector) alsoRetryAfter(resp *yaml.Node, code string) {
	if code != "409" && code != "429" && code != "503" {
		return
	}
	headers := get(resp, "headers")
	if headers == nil {
		headers = mapping()
		set(resp, "headers", headers)
	}
	if headers.Kind != yaml.MappingNode || headers.Anchor != "" || getFold(headers, "Retry-After") != nil {
		return
	}
	set(headers, "Retry-After", in.header("integer", "With idem's "+problemJSON+": seconds to wait before retrying."))
}

// descriptionNode returns resp's description to append to: the string
// node, an empty one if there is none or it is null, and nil if it is
// something else (a number, or an alias whose anchor other responses share).
func descriptionNode(resp *yaml.Node) *yaml.Node {
	for i := 0; i+1 < len(resp.Content); i += 2 {
		if resp.Content[i].Value != "description" {
			continue
		}
		switch v := resp.Content[i+1]; {
		case v.Kind != yaml.ScalarNode || v.Anchor != "":
			return nil
		case v.ShortTag() == "!!null":
			return str("")
		case v.ShortTag() == "!!str":
			return v
		default:
			return nil
		}
	}
	return str("")
}

func (in *injector) problemResponse(code string) *yaml.Node {
	desc := in.problemDescription(code)
	var headers *yaml.Node
	if code == "409" || code == "429" || code == "503" {
		headers = mapping("Retry-After", in.header("integer", "Seconds to wait before retrying."))
	}
	if in.v3 {
		r := mapping("description", str(desc))
		if headers != nil {
			set(r, "headers", headers)
		}
		set(r, "content", mapping(problemJSON, mapping("schema", mapping("$ref", str("#/components/schemas/"+ProblemSchema)))))
		return r
	}
	r := mapping("description", str(desc), "schema", mapping("$ref", str("#/definitions/"+ProblemSchema)))
	if headers != nil {
		set(r, "headers", headers)
	}
	return r
}

// problemDescription says when idem answers code.
func (in *injector) problemDescription(code string) string {
	var desc string
	switch code {
	case "400":
		desc = "Invalid " + in.opts.KeyHeader + " header."
		if in.opts.Required {
			desc = "Missing or invalid " + in.opts.KeyHeader + " header."
		}
	case "409":
		desc = "A request with the same idempotency key is still in progress; retry after Retry-After seconds."
	case "413":
		desc = "The request carries an idempotency key and a body over " + strconv.FormatInt(in.opts.MaxBodyBytes, 10) + " bytes."
	case "422":
		desc = "The idempotency key was already used with a different request."
	case "429":
		desc = "Too many requests with idempotency keys in this scope (in flight, or new within the quota's window): " +
			"the request was not run; retry after Retry-After seconds."
	case "503":
		desc = "The idempotency store is busy, or a stored response could not be read: the request was not run; retry after Retry-After seconds."
		if in.opts.FailClosed {
			desc = "The idempotency store is unavailable or busy, or a stored response could not be read: " +
				"the request was not run; retry after Retry-After seconds."
		}
	}
	return desc
}

// produceProblem adds application/problem+json to the media types a
// Swagger 2.0 operation produces, if it or the document lists any.
func (in *injector) produceProblem(op *yaml.Node) {
	produces := get(op, "produces")
	if produces == nil {
		global := get(in.root, "produces")
		if global == nil || global.Kind != yaml.SequenceNode {
			return // produces nothing declared: any media type
		}
		produces = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, t := range global.Content {
			produces.Content = append(produces.Content, str(t.Value))
		}
		insertBefore(op, "produces", produces, "tags", "summary", "operationId", "parameters", "responses")
	}
	if produces.Kind != yaml.SequenceNode || produces.Anchor != "" {
		return
	}
	for _, t := range produces.Content {
		if t.Value == problemJSON {
			return
		}
	}
	produces.Content = append(produces.Content, str(problemJSON))
}

func (in *injector) addProblemSchema() error {
	parent, key := in.root, "definitions"
	if in.v3 {
		components := get(in.root, "components")
		if components == nil {
			components = mapping()
			insertAfter(in.root, "components", components, "paths")
		}
		if components.Kind != yaml.MappingNode {
			return errors.New("swagger: components is not an object")
		}
		parent, key = components, "schemas"
	}
	schemas := get(parent, key)
	if schemas == nil {
		schemas = mapping()
		if in.v3 {
			insertSorted(parent, key, schemas)
		} else {
			insertAfter(parent, key, schemas, "paths")
		}
	}
	if schemas.Kind != yaml.MappingNode {
		return errors.New("swagger: " + key + " is not an object")
	}
	if get(schemas, ProblemSchema) != nil {
		return nil
	}
	prop := func(typ, desc string) *yaml.Node {
		return mapping("description", str(desc), "type", str(typ))
	}
	insertSorted(schemas, ProblemSchema, mapping(
		"description", str("RFC 9457 problem details: the body of an idempotency error."),
		"type", str("object"),
		"required", &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq", Content: []*yaml.Node{str("type"), str("title"), str("status")}},
		"properties", mapping(
			"type", prop("string", "A URI identifying the kind of error, stable across releases."),
			"title", prop("string", "A short summary of the kind of error."),
			"status", prop("integer", "The HTTP status code."),
			"detail", prop("string", "An explanation of this occurrence of the error."),
		),
	))
	return nil
}

// serverPath returns the URL of the first server of an OpenAPI 3 document,
// its variables replaced by their defaults.
func serverPath(servers *yaml.Node) string {
	if servers == nil || servers.Kind != yaml.SequenceNode || len(servers.Content) == 0 {
		return ""
	}
	s := deref(servers.Content[0])
	u := scalar(get(s, "url"))
	if vars := get(s, "variables"); vars != nil && vars.Kind == yaml.MappingNode {
		for i := 0; i+1 < len(vars.Content); i += 2 {
			u = strings.ReplaceAll(u, "{"+vars.Content[i].Value+"}", scalar(get(vars.Content[i+1], "default")))
		}
	}
	return u
}

// editable refuses to edit a YAML node that is shared by other parts of the
// document through an anchor, which would document the key on them too.
func editable(n *yaml.Node) error {
	if n.Kind == yaml.AliasNode || n.Anchor != "" {
		return errors.New("YAML anchors and aliases are not supported in covered operations")
	}
	return nil
}

// Node helpers.

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	return n
}

// get returns the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	m = deref(m)
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return deref(m.Content[i+1])
		}
	}
	return nil
}

// getFold is get with key matched case-insensitively.
func getFold(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if strings.EqualFold(m.Content[i].Value, key) {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalar(n *yaml.Node) string {
	if n == nil || n.Kind != yaml.ScalarNode {
		return ""
	}
	return n.Value
}

// set appends key: v to mapping m.
func set(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, str(key), v)
}

// insertBefore inserts key: v into m before the first of the keys before
// that m has, or at the end.
func insertBefore(m *yaml.Node, key string, v *yaml.Node, before ...string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		for _, b := range before {
			if m.Content[i].Value == b {
				m.Content = append(m.Content[:i], append([]*yaml.Node{str(key), v}, m.Content[i:]...)...)
				return
			}
		}
	}
	set(m, key, v)
}

// insertAfter inserts key: v into m after the key after, or at the end.
func insertAfter(m *yaml.Node, key string, v *yaml.Node, after string) {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == after {
			i += 2
			m.Content = append(m.Content[:i], append([]*yaml.Node{str(key), v}, m.Content[i:]...)...)
			return
		}
	}
	set(m, key, v)
}

// insertSorted inserts key: v into m in its sorted place if m's keys are
// sorted (as swag and kin-openapi write them), or at the end, and returns
// the key's node.
func insertSorted(m *yaml.Node, key string, v *yaml.Node) *yaml.Node {
	at := len(m.Content)
	for i := 0; i+1 < len(m.Content); i += 2 {
		if i > 0 && m.Content[i-2].Value > m.Content[i].Value {
			at = len(m.Content) // not sorted
			break
		}
		if at == len(m.Content) && m.Content[i].Value > key {
			at = i
		}
	}
	k := str(key)
	m.Content = append(m.Content[:at], append([]*yaml.Node{k, v}, m.Content[at:]...)...)
	return k
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

func integer(i int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(i)}
}

func boolean(b bool) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(b)}
}

// mapping returns a mapping of the pairs kv: string keys, *yaml.Node values.
func mapping(kv ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kv); i += 2 {
		set(m, kv[i].(string), kv[i+1].(*yaml.Node))
	}
	return m
}
