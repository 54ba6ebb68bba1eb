// Package modtree finds the Go modules of the idem repository, rewrites
// their requirements on each other and orders them for tagging. The release
// scheme is in docs/release.md.
package modtree

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/semver"
)

// Prefix is the path of the root module; every other idem module's path is
// Prefix, a slash and its directory.
const Prefix = "github.com/idem-go/idem"

// unreleased are the modules a release does not tag: programs of this
// repository that no other module imports.
var unreleased = map[string]bool{"examples": true, "examples/grpc": true, "loadtest": true, "scripts": true}

// Module is one go.mod of the tree.
type Module struct {
	Dir      string        // relative to the tree's root, slash-separated; "." for the root module
	Path     string        // the module path
	File     *modfile.File // the parsed go.mod
	Released bool          // tagged by a release
}

// Tag is the module's git tag for version: the version for the root module,
// the module's directory and the version for the others (ginidem/v0.1.0).
func (m *Module) Tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// CheckVersion accepts a canonical semantic version without build metadata
// whose major version is v0 or v1 (v2 would need /v2 module paths).
func CheckVersion(v string) error {
	switch {
	case !semver.IsValid(v) || semver.Canonical(v) != v || semver.Build(v) != "":
		return fmt.Errorf("modtree: %q is not a version like v0.1.0", v)
	case semver.Major(v) != "v0" && semver.Major(v) != "v1":
		return fmt.Errorf("modtree: %s: a major version above v1 needs /%s module paths", v, semver.Major(v))
	}
	return nil
}

// Find returns the modules of the tree at root, sorted by directory. It skips
// hidden directories (.git, .tools), testdata and vendor.
func Find(root string) ([]*Module, error) {
	var mods []*Module
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "vendor") {
			return filepath.SkipDir
		}
		if d.IsDir() || d.Name() != "go.mod" {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		f, err := modfile.Parse(path, data, nil)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		m := &Module{Dir: filepath.ToSlash(rel), File: f}
		if f.Module != nil {
			m.Path = f.Module.Mod.Path
		}
		if want := modulePath(m.Dir); m.Path != want {
			return fmt.Errorf("modtree: %s declares module %q, want %q (the tag prefix is the directory)", path, m.Path, want)
		}
		m.Released = !unreleased[m.Dir]
		mods = append(mods, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Dir < mods[j].Dir })
	if len(mods) == 0 || mods[0].Dir != "." {
		return nil, fmt.Errorf("modtree: no go.mod at %s", root)
	}
	return mods, nil
}

func modulePath(dir string) string {
	if dir == "." {
		return Prefix
	}
	return Prefix + "/" + dir
}

// Rewrite sets every requirement on a released module to version, in every
// module's go.mod, keeps the replace lines, writes the files that changed and
// returns their modules.
func Rewrite(root string, mods []*Module, version string) ([]*Module, error) {
	if err := CheckVersion(version); err != nil {
		return nil, err
	}
	released := map[string]bool{}
	for _, m := range mods {
		released[m.Path] = m.Released
	}
	var changed []*Module
	for _, m := range mods {
		before, err := m.File.Format()
		if err != nil {
			return nil, err
		}
		for _, r := range m.File.Require {
			if !strings.HasPrefix(r.Mod.Path, Prefix) {
				continue
			}
			if !released[r.Mod.Path] {
				return nil, fmt.Errorf("modtree: %s/go.mod requires %s, which is no released module of this tree", m.Dir, r.Mod.Path)
			}
			if err := m.File.AddRequire(r.Mod.Path, version); err != nil {
				return nil, err
			}
		}
		m.File.Cleanup()
		after, err := m.File.Format()
		if err != nil {
			return nil, err
		}
		if bytes.Equal(before, after) {
			continue
		}
		if err := os.WriteFile(filepath.Join(root, m.Dir, "go.mod"), after, 0o644); err != nil {
			return nil, err
		}
		changed = append(changed, m)
	}
	return changed, nil
}

// DropReplaces removes, from the go.mod of every released module, the
// replace lines that point an idem module at a directory, writes the files
// that changed and returns their modules.
func DropReplaces(root string, mods []*Module) ([]*Module, error) {
	var changed []*Module
	for _, m := range mods {
		if !m.Released {
			continue
		}
		n := 0
		for _, r := range m.File.Replace {
			if strings.HasPrefix(r.Old.Path, Prefix) && r.New.Version == "" {
				if err := m.File.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return nil, err
				}
				n++
			}
		}
		if n == 0 {
			continue
		}
		m.File.Cleanup()
		data, err := m.File.Format()
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(filepath.Join(root, m.Dir, "go.mod"), data, 0o644); err != nil {
			return nil, err
		}
		changed = append(changed, m)
	}
	return changed, nil
}

// Released returns the released modules in dependency order: each after the
// idem modules it requires (the root module first), in a stable order.
func Released(mods []*Module) ([]*Module, error) {
	byPath := map[string]*Module{}
	for _, m := range mods {
		if m.Released {
			byPath[m.Path] = m
		}
	}
	done := map[*Module]bool{}
	var order []*Module
	for len(order) < len(byPath) {
		progress := false
		for _, m := range mods {
			if !m.Released || done[m] || !requiresDone(m, byPath, done) {
				continue
			}
			done[m] = true
			order = append(order, m)
			progress = true
		}
		if !progress {
			return nil, errors.New("modtree: the released modules require each other in a cycle")
		}
	}
	return order, nil
}

func requiresDone(m *Module, byPath map[string]*Module, done map[*Module]bool) bool {
	for _, r := range m.File.Require {
		if dep, ok := byPath[r.Mod.Path]; ok && dep != m && !done[dep] {
			return false
		}
	}
	return true
}
