package swagger

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"go.yaml.in/yaml/v3"
)

// FuzzInject checks that no input makes Inject panic, that what it accepts
// it returns in the same format, and that a second run changes nothing.
// Its seed corpus (the testdata documents) runs with every go test. Under
// -fuzz the progress line may read "0/sec" for long stretches while the
// workers run thousands of inputs a second (golang/go#51484).
func FuzzInject(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.json")
	yamls, _ := filepath.Glob("testdata/*.yaml")
	for _, name := range append(files, yamls...) {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data, false)
		f.Add(data, true)
	}
	f.Add([]byte(`{"swagger":"2.0","paths":{"/a/{b}":{"post":{"responses":{"200":{"$ref":"#/responses/x"}}}}}}`), true)
	f.Add([]byte("openapi: 3.0.0\npaths:\n  /a:\n    post:\n      responses:\n        200: {description: ok}\n"), false)
	f.Add([]byte(`{"schemes": {{ marshal .Schemes }}, "swagger": "2.0", "paths": {"/o": {"put": {}}}}`), true)
	f.Add([]byte(`{"swagger":"2.0","paths":{"/o":{"post":{"responses":{"400":{"description":null},"409":{"description":true}}}}}}`), false)

	f.Fuzz(func(t *testing.T, doc []byte, asTemplate bool) {
		opts := Options{Required: asTemplate}
		if asTemplate {
			out, err := InjectTemplate(string(doc), opts)
			if err != nil {
				return
			}
			again, err := InjectTemplate(out, opts)
			if err != nil || again != out {
				t.Fatalf("second run: err %v, changed:\n%s\n----\n%s", err, out, again)
			}
			return
		}
		out, err := Inject(doc, opts)
		if err != nil {
			return
		}
		again, err := Inject(out, opts)
		if err != nil {
			t.Fatalf("second run: %v\n%s", err, out)
		}
		if bytes.HasPrefix(bytes.TrimLeft(doc, " \t\r\n\ufeff"), []byte("{")) {
			if !json.Valid(out) {
				t.Fatalf("invalid JSON out:\n%s", out)
			}
			if !bytes.Equal(again, out) {
				t.Fatalf("second run changed the document:\n%s\n----\n%s", out, again)
			}
			return
		}
		if bytes.Equal(again, out) {
			return
		}
		// yaml.v3 may lay out comments differently on a second pass; the
		// content must not change.
		var a, b any
		if yaml.Unmarshal(out, &a) != nil || yaml.Unmarshal(again, &b) != nil || !reflect.DeepEqual(a, b) {
			t.Fatalf("second run changed the document:\n%s\n----\n%s", out, again)
		}
	})
}
