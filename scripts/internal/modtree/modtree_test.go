package modtree_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-go/idem/scripts/internal/modtree"
)

// tree writes go.mod files, keyed by directory, under a new directory.
func tree(t testing.TB, files map[string]string) string {
	root := t.TempDir()
	for dir, mod := range files {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, dir, "go.mod"), []byte(mod), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

var repo = map[string]string{
	".": "module github.com/idem-go/idem\n\ngo 1.24\n\nrequire github.com/google/uuid v1.6.0 // keys\n",
	"pgstore": `module github.com/idem-go/idem/pgstore

go 1.25.0

require (
	github.com/idem-go/idem v0.0.0 // the Store contract
	github.com/jackc/pgx/v5 v5.12.0
)

replace github.com/idem-go/idem => ../
`,
	"idemctl": `module github.com/idem-go/idem/idemctl

go 1.25.0

require (
	github.com/idem-go/idem/pgstore v0.0.0
	github.com/idem-go/idem v0.0.0-00010101000000-000000000000
)

replace github.com/idem-go/idem => ../

replace github.com/idem-go/idem/pgstore => ../pgstore
`,
	"examples":      "module github.com/idem-go/idem/examples\n\ngo 1.25.0\n\nrequire github.com/idem-go/idem/idemctl v0.0.0\n",
	".tools/x":      "module broken\n",
	"core/testdata": "module broken\n",
}

func TestRewriteAndOrder(t *testing.T) {
	root := tree(t, repo)
	mods, err := modtree.Find(root)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, m := range mods {
		got = append(got, fmt.Sprintf("%s=%s released=%v", m.Dir, m.Path, m.Released))
	}
	want := []string{
		".=github.com/idem-go/idem released=true",
		"examples=github.com/idem-go/idem/examples released=false",
		"idemctl=github.com/idem-go/idem/idemctl released=true",
		"pgstore=github.com/idem-go/idem/pgstore released=true",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("Find:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	changed, err := modtree.Rewrite(root, mods, "v0.1.0")
	if err != nil {
		t.Fatal(err)
	}
	if len(changed) != 3 {
		t.Errorf("Rewrite changed %d go.mod files, want 3 (pgstore, idemctl, examples)", len(changed))
	}
	data, err := os.ReadFile(filepath.Join(root, "pgstore", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{
		"github.com/idem-go/idem v0.1.0 // the Store contract",
		"github.com/jackc/pgx/v5 v5.12.0",
		"replace github.com/idem-go/idem => ../",
	} {
		if !strings.Contains(string(data), line) {
			t.Errorf("pgstore/go.mod lacks %q:\n%s", line, data)
		}
	}
	data, err = os.ReadFile(filepath.Join(root, "idemctl", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(data), " v0.1.0") != 2 || strings.Contains(string(data), "v0.0.0") {
		t.Errorf("idemctl/go.mod:\n%s", data)
	}

	mods, err = modtree.Find(root)
	if err != nil {
		t.Fatal(err)
	}
	if changed, err := modtree.Rewrite(root, mods, "v0.1.0"); err != nil || len(changed) != 0 {
		t.Errorf("a second Rewrite changed %d files (err %v), want none", len(changed), err)
	}
	dropped, err := modtree.DropReplaces(root, mods)
	if err != nil {
		t.Fatal(err)
	}
	if len(dropped) != 2 || dropped[0].Dir != "idemctl" || dropped[1].Dir != "pgstore" {
		t.Errorf("DropReplaces changed %d go.mod files, want idemctl's and pgstore's", len(dropped))
	}
	data, err = os.ReadFile(filepath.Join(root, "idemctl", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(data), "replace") || !strings.Contains(string(data), "github.com/idem-go/idem/pgstore v0.1.0") {
		t.Errorf("idemctl/go.mod without its replace lines:\n%s", data)
	}
	order, err := modtree.Released(mods)
	if err != nil {
		t.Fatal(err)
	}
	var tags []string
	for _, m := range order {
		tags = append(tags, m.Tag("v0.1.0"))
	}
	if got, want := strings.Join(tags, " "), "v0.1.0 pgstore/v0.1.0 idemctl/v0.1.0"; got != want {
		t.Errorf("tags in order %q, want %q", got, want)
	}
}

func TestFindRefusesAPathThatIsNotTheDirectory(t *testing.T) {
	root := tree(t, map[string]string{".": repo["."], "ginidem": "module github.com/idem-go/gin\n"})
	if _, err := modtree.Find(root); err == nil || !strings.Contains(err.Error(), "want \"github.com/idem-go/idem/ginidem\"") {
		t.Fatalf("Find: %v, want the module path refused", err)
	}
}

func TestRewriteRefusesAnUnreleasedRequirement(t *testing.T) {
	root := tree(t, map[string]string{
		".":        repo["."],
		"pgstore":  "module github.com/idem-go/idem/pgstore\n\nrequire github.com/idem-go/idem/examples v0.0.0\n",
		"examples": repo["examples"],
	})
	mods, err := modtree.Find(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := modtree.Rewrite(root, mods, "v0.1.0"); err == nil {
		t.Fatal("Rewrite accepted a released module requiring examples")
	}
}

func TestCheckVersion(t *testing.T) {
	for v, ok := range map[string]bool{
		"v0.1.0": true, "v1.2.3": true, "v0.2.0-rc.1": true,
		"": false, "0.1.0": false, "v0.1": false, "v0.1.0+meta": false, "v2.0.0": false,
	} {
		if err := modtree.CheckVersion(v); (err == nil) != ok {
			t.Errorf("CheckVersion(%q) = %v, want ok=%v", v, err, ok)
		}
	}
}

func ExampleModule_Tag() {
	for _, m := range []*modtree.Module{{Dir: "."}, {Dir: "ginidem"}} {
		fmt.Println(m.Tag("v0.1.0"))
	}
	// Output:
	// v0.1.0
	// ginidem/v0.1.0
}
