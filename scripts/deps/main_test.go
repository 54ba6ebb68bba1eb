package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// write writes files under root.
func write(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		if err := os.MkdirAll(filepath.Join(root, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

const yamlSum = `gopkg.in/yaml.v3 v3.0.1 h1:fxVm/GzAzEWqLHuvctI91KS9hhNmmWOoWu0XTYJS7CA=
gopkg.in/yaml.v3 v3.0.1/go.mod h1:K4uyk7z7BCEPqu6E+C64Yfv1cQ7kz7rIZviUmN+EgEM=
`

// sibling is the go.mod of a module in dir that requires the root module at version.
func sibling(dir, version string) string {
	return "module github.com/idem-go/idem/" + dir + "\n\ngo 1.25.0\n\nrequire github.com/idem-go/idem " + version +
		"\n\nrequire gopkg.in/yaml.v3 v3.0.1 // indirect\n\nreplace github.com/idem-go/idem => ../\n"
}

func TestDeps(t *testing.T) {
	root := t.TempDir()
	write(t, root, map[string]string{
		"go.mod":             "module github.com/idem-go/idem\n\ngo 1.25.0\n\nrequire gopkg.in/yaml.v3 v3.0.1\n",
		"go.sum":             yamlSum,
		"swagger/yaml.go":    "package swagger\n\nimport _ \"gopkg.in/yaml.v3\"\n",
		"ginidem/go.mod":     sibling("ginidem", "v0.1.0"),
		"pgstore/go.mod":     sibling("pgstore", "v0.1.0"),
		"pgstore/go.sum":     yamlSum,
		"ginidem/go.sum":     yamlSum,
		"ginidem/ginidem.go": "package ginidem\n\nimport _ \"github.com/idem-go/idem/swagger\"\n",
		"docs/README":        "",
	})
	err := run(root, false)
	for _, want := range []string{
		"github.com/idem-go/idem/swagger imports gopkg.in/yaml.v3",
		"github.com/idem-go/idem: gopkg.in/yaml.v3 has no reason",
		"github.com/idem-go/idem/ginidem: github.com/idem-go/idem has no reason",
		"github.com/idem-go/idem/pgstore: github.com/idem-go/idem has no reason",
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run: %v\nwant %q", err, want)
		}
	}
	data, rerr := os.ReadFile(filepath.Join(root, doc))
	if rerr != nil {
		t.Fatal(rerr)
	}
	if !strings.Contains(string(data), "| gopkg.in/yaml.v3 | packages | ? |") {
		t.Fatalf("%s:\n%s", doc, data)
	}

	// Reasons written, the import gone: make deps, then the check, pass.
	reasons := strings.ReplaceAll(strings.Replace(string(data), "| ? |", "| swagger's YAML |", 1), "| ? |", "| the Engine |")
	write(t, root, map[string]string{doc: reasons, "swagger/yaml.go": "package swagger\n"})
	if err := run(root, false); err != nil {
		t.Fatalf("run with every reason: %v", err)
	}
	if err := run(root, true); err != nil {
		t.Fatalf("run -check after run: %v", err)
	}
	data, err = os.ReadFile(filepath.Join(root, doc))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "| gopkg.in/yaml.v3 | other build tags | swagger's YAML |") {
		t.Fatalf("%s keeps the reason and says no package uses yaml.v3:\n%s", doc, data)
	}

	// A second version of the root, and a file edited by hand.
	write(t, root, map[string]string{"pgstore/go.mod": sibling("pgstore", "v0.0.0"), doc: string(data) + "\nmore\n"})
	err = run(root, true)
	for _, want := range []string{"more than one version", "is stale: run make deps"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("run -check: %v\nwant %q", err, want)
		}
	}
}
