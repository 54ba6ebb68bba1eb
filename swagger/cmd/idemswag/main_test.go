package main

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func copyTestdata(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join("..", "..", "testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRun(t *testing.T) {
	t.Parallel()
	dir := copyTestdata(t, "swagger.json", "swagger.yaml")
	args := []string{"-dir", dir, "-required", "-max-key-length", "64",
		"-op", "POST /api/v1/orders", "-op", "PUT /api/v1/orders/:orderID", "-op", "DELETE /api/v1/orders/:orderID"}
	if err := run(args, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"swagger.json", "swagger.yaml"} {
		got, _ := os.ReadFile(filepath.Join(dir, name))
		want, err := os.ReadFile(filepath.Join("..", "..", "testdata", name+".golden"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from testdata/%s.golden:\n%s", name, name, got)
		}
	}
	// A second run (go generate again) changes nothing.
	before, _ := os.ReadFile(filepath.Join(dir, "swagger.yaml"))
	if err := run(args, io.Discard); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(filepath.Join(dir, "swagger.yaml")); !bytes.Equal(before, after) {
		t.Error("a second run changed swagger.yaml")
	}
}

// TestRunMaxBodyBytes checks that -max-body-bytes reaches the documented
// 413 (the golden files have the default).
func TestRunMaxBodyBytes(t *testing.T) {
	t.Parallel()
	dir := copyTestdata(t, "swagger.json")
	if err := run([]string{"-dir", dir, "-max-body-bytes", "4096"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "swagger.json"))
	if !bytes.Contains(got, []byte("a body over 4096 bytes")) || bytes.Contains(got, []byte("1048576")) {
		t.Errorf("swagger.json does not document a 413 past 4096 bytes (and only that):\n%s", got)
	}
}

// TestRunQuota checks that -quota documents the 429 of Config.Quota, with
// Retry-After, as swagger.OptionsFor does at run time (the golden files
// have none).
func TestRunQuota(t *testing.T) {
	t.Parallel()
	dir := copyTestdata(t, "swagger.json")
	if err := run([]string{"-dir", dir, "-quota", "-op", "POST /api/v1/orders"}, io.Discard); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(filepath.Join(dir, "swagger.json"))
	var doc struct {
		Paths map[string]map[string]struct {
			Responses map[string]struct {
				Headers map[string]any
				Schema  struct {
					Ref string `json:"$ref"`
				}
			}
		}
	}
	if err := json.Unmarshal(got, &doc); err != nil {
		t.Fatal(err)
	}
	r, ok := doc.Paths["/orders"]["post"].Responses["429"]
	if !ok || r.Schema.Ref != "#/definitions/idem.Problem" || r.Headers["Retry-After"] == nil {
		t.Errorf("POST /orders does not document the 429 problem with Retry-After:\n%s", got)
	}
}

func TestRunFiles(t *testing.T) {
	t.Parallel()
	dir := copyTestdata(t, "openapi.json", "openapi.yaml")
	files := filepath.Join(dir, "openapi.json") + "," + filepath.Join(dir, "openapi.yaml")
	if err := run([]string{"-files", files}, io.Discard); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"openapi.json", "openapi.yaml"} {
		got, _ := os.ReadFile(filepath.Join(dir, name))
		want, _ := os.ReadFile(filepath.Join("..", "..", "testdata", name+".golden"))
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from testdata/%s.golden", name, name)
		}
	}
}

func TestRunErrors(t *testing.T) {
	t.Parallel()
	empty := t.TempDir()
	bad := t.TempDir()
	docs := copyTestdata(t, "swagger.json", "swagger.yaml")
	if err := os.WriteFile(filepath.Join(bad, "swagger.json"), []byte(`{"swagger": "2.0", "paths": [`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-dir", empty}, "run swag init first"},
		{[]string{"-files", filepath.Join(empty, "openapi.json")}, "no such file"},
		{[]string{"-dir", bad}, "swagger: invalid JSON"},
		{[]string{"-op", "POST /a /b"}, "usage"},
		{[]string{"-dir", empty, "extra"}, "unexpected arguments"},
		{[]string{"-dir", docs, "-max-body-bytes", "0"}, "must be positive"},
		{[]string{"-dir", docs, "-max-key-length", "-1"}, "must be positive"},
		{[]string{"-dir", docs, "-op", "POST /api/v1/order"}, `-op "POST /api/v1/order" matches no covered operation`},
		{[]string{"-dir", docs, "-op", "GET /api/v1/orders"}, `-op "GET /api/v1/orders" matches no covered operation`},
		{[]string{"-dir", docs, "-op", "POST /api/v1/orders", "-base-path", "/v2"}, "matches no covered operation"},
		{[]string{"-dir", docs, "-op", "POST /api/v1/orders", "-op", "POST /nope"}, `-op "POST /nope" matches no covered operation`},
	} {
		err := run(tc.args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("run(%q) = %v, want an error with %q", tc.args, err, tc.want)
		}
	}
	// Files Inject re-encodes (swag's YAML indentation, JSON escapes) are
	// checked the same.
	yamlOnly := copyTestdata(t, "swagger.yaml")
	escaped := filepath.Join(t.TempDir(), "swagger.json")
	if err := os.WriteFile(escaped, []byte(`{"swagger": "2.0", "info": {"title": "A \u0026 B"},
		"paths": {"/orders": {"post": {"responses": {"201": {"description": "created"}}}}}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"-dir", yamlOnly, "-op", "POST /nope"},
		{"-files", escaped, "-op", "POST /nope"},
	} {
		err := run(args, io.Discard)
		if err == nil || !strings.Contains(err.Error(), `-op "POST /nope" matches no covered operation`) {
			t.Errorf("run(%q) = %v, want an unmatched -op", args, err)
		}
	}
	if err := run([]string{"-files", escaped, "-op", "POST /orders"}, io.Discard); err != nil {
		t.Errorf("a matching -op: %v", err)
	}
	// A failed run rewrites nothing.
	for _, name := range []string{"swagger.json", "swagger.yaml"} {
		got, _ := os.ReadFile(filepath.Join(docs, name))
		want, _ := os.ReadFile(filepath.Join("..", "..", "testdata", name))
		if !bytes.Equal(got, want) {
			t.Errorf("%s was rewritten by a failed run", name)
		}
	}
}
