// Command modproxy writes a file-based Go module proxy holding every
// released module of a tree at one version, as the tags of a release would
// publish them: GOPROXY=file://OUT then serves them to go get.
//
//	go run ./modproxy -dir TREE -version v0.1.0 -out OUT
//
// TREE is a copy of the repository whose go.mod files `release -rewrite`
// has set to the version; files that git ignores must not be in it (a
// module zip holds every file of its directory, nested modules aside).
// As the go command does for a module in a subdirectory of its repository,
// a module without a LICENSE file gets the tree's: modproxy copies it into
// the module's directory of TREE.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
	modzip "golang.org/x/mod/zip"

	"github.com/idem-go/idem/scripts/internal/modtree"
)

func main() {
	dir := flag.String("dir", ".", "the tree to publish")
	version := flag.String("version", "", "the version of every module, like v0.1.0")
	out := flag.String("out", "", "the proxy's directory")
	flag.Parse()
	if err := run(*dir, *version, *out); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(dir, version, out string) error {
	if err := modtree.CheckVersion(version); err != nil {
		return err
	}
	if out == "" {
		return fmt.Errorf("-out is required")
	}
	mods, err := modtree.Find(dir)
	if err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	license, err := os.ReadFile(filepath.Join(dir, "LICENSE"))
	if err != nil {
		return err
	}
	n := 0
	for _, m := range mods {
		if !m.Released {
			continue
		}
		if err := addLicense(filepath.Join(dir, m.Dir), license); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
		if err := publish(filepath.Join(dir, m.Dir), module.Version{Path: m.Path, Version: version}, info, out); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
		n++
	}
	fmt.Printf("modproxy: %d modules at %s in %s\n", n, version, out)
	return nil
}

// addLicense writes license as moddir's LICENSE unless it has one.
func addLicense(moddir string, license []byte) error {
	f, err := os.OpenFile(filepath.Join(moddir, "LICENSE"), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if errors.Is(err, fs.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(license); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// publish writes the list, .info, .mod and .zip files of one module version.
func publish(src string, mv module.Version, info []byte, out string) error {
	escaped, err := module.EscapePath(mv.Path)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(src, "go.mod"))
	if err != nil {
		return err
	}
	z, err := os.Create(filepath.Join(dir, mv.Version+".zip"))
	if err != nil {
		return err
	}
	if err := modzip.CreateFromDir(z, mv, src); err != nil {
		z.Close()
		return err
	}
	if err := z.Close(); err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		"list":               []byte(mv.Version + "\n"),
		mv.Version + ".info": info,
		mv.Version + ".mod":  gomod,
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
