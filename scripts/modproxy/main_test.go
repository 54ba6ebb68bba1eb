package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"
)

func TestProxy(t *testing.T) {
	src := t.TempDir()
	for name, data := range map[string]string{
		"LICENSE":            "the repository's license\n",
		"go.mod":             "module github.com/idem-go/idem\n\ngo 1.24\n",
		"core/core.go":       "package core\n",
		"ginidem/go.mod":     "module github.com/idem-go/idem/ginidem\n\ngo 1.25.0\n\nrequire github.com/idem-go/idem v0.1.0\n",
		"ginidem/ginidem.go": "package ginidem\n",
		"examples/go.mod":    "module github.com/idem-go/idem/examples\n",
	} {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	if err := run(src, "v0.1.0", out); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string][]string{
		"github.com/idem-go/idem":         {"LICENSE", "core/core.go", "go.mod"},
		"github.com/idem-go/idem/ginidem": {"LICENSE", "ginidem.go", "go.mod"}, // the repository's LICENSE, as the go command adds it
	} {
		dir := filepath.Join(out, path, "@v")
		cf, err := modzip.CheckZip(module.Version{Path: path, Version: "v0.1.0"}, filepath.Join(dir, "v0.1.0.zip"))
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for i := range want {
			want[i] = path + "@v0.1.0/" + want[i]
		}
		if strings.Join(cf.Valid, " ") != strings.Join(want, " ") {
			t.Errorf("%s zip holds %q, want %q", path, cf.Valid, want)
		}
		for _, name := range []string{"list", "v0.1.0.info", "v0.1.0.mod"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				t.Error(err)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(out, "github.com/idem-go/idem/examples")); !os.IsNotExist(err) {
		t.Errorf("examples, not released, is in the proxy (%v)", err)
	}
}
