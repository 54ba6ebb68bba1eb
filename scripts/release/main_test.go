package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// repo makes a git repository with a root module and ginidem, which requires
// it at v0.0.0 through a replace line.
func repo(t *testing.T) string {
	t.Helper()
	for k, v := range map[string]string{"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
		"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com", "GIT_CONFIG_GLOBAL": os.DevNull} {
		t.Setenv(k, v)
	}
	dir := t.TempDir()
	files := map[string]string{
		"go.mod": "module github.com/idem-go/idem\n\ngo 1.24\n",
		"ginidem/go.mod": "module github.com/idem-go/idem/ginidem\n\ngo 1.25.0\n\n" +
			"require github.com/idem-go/idem v0.0.0\n\nreplace github.com/idem-go/idem => ../\n",
		"examples/go.mod":    "module github.com/idem-go/idem/examples\n\ngo 1.25.0\n\nrequire github.com/idem-go/idem/ginidem v0.0.0\n",
		"ginidem/ginidem.go": "package ginidem\n",
	}
	for name, data := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"commit", "-q", "-m", "init"}} {
		if _, err := git(dir, args...); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestRelease(t *testing.T) {
	dir := repo(t)
	if err := run(dir, "v0.1.0", ""); err != nil {
		t.Fatal(err)
	}
	tags, err := git(dir, "tag", "--list")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Fields(tags), []string{"ginidem/v0.1.0", "v0.1.0"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("tags %q, want %q (examples is not released)", got, want)
	}
	for file, line := range map[string]string{
		"ginidem/go.mod":  "require github.com/idem-go/idem v0.1.0\n",
		"examples/go.mod": "require github.com/idem-go/idem/ginidem v0.1.0\n",
	} {
		mod, err := git(dir, "show", "ginidem/v0.1.0:"+file)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(mod+"\n", line) {
			t.Errorf("%s at the tag lacks %q:\n%s", file, line, mod)
		}
	}
	if mod, _ := git(dir, "show", "v0.1.0:ginidem/go.mod"); strings.Contains(mod, "replace") {
		t.Errorf("ginidem/go.mod at the tag has a replace line:\n%s", mod)
	}
	if mod, _ := git(dir, "show", "HEAD:ginidem/go.mod"); !strings.Contains(mod, "require github.com/idem-go/idem v0.1.0\n") ||
		!strings.Contains(mod, "replace github.com/idem-go/idem => ../") {
		t.Errorf("ginidem/go.mod after the release, want v0.1.0 and the replace line:\n%s", mod)
	}
	if log, _ := git(dir, "log", "--format=%s"); len(strings.Split(log, "\n")) != 4 {
		t.Errorf("commits after the release:\n%s\nwant the requires, the tagged tree, the replace lines back, init", log)
	}
	if status, _ := git(dir, "status", "--porcelain"); status != "" {
		t.Errorf("the tree is dirty after the release:\n%s", status)
	}
	if err := run(dir, "v0.1.0", ""); err == nil || !strings.Contains(err.Error(), "tag v0.1.0 exists") {
		t.Errorf("a second release of v0.1.0: %v, want refused", err)
	}
}

func TestReleaseRefusesADirtyTree(t *testing.T) {
	dir := repo(t)
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run(dir, "v0.1.0", ""); err == nil || !strings.Contains(err.Error(), "not clean") {
		t.Fatalf("release in a dirty tree: %v, want refused", err)
	}
	if tags, _ := git(dir, "tag", "--list"); tags != "" {
		t.Errorf("tags %q after a refusal", tags)
	}
}

func TestReleaseRefusesABadVersion(t *testing.T) {
	dir := repo(t)
	for _, v := range []string{"0.1.0", "v2.0.0", ""} {
		if err := run(dir, v, ""); err == nil {
			t.Errorf("release %q accepted", v)
		}
	}
}
