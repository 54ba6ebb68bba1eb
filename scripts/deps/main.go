// Command deps keeps docs/dependencies.md: every module's direct
// dependencies, whether its packages or only its tests use each, and why it
// is there. The reasons are written by hand in that file; deps rewrites the
// rest from the go.mod files and keeps them. It fails if a direct dependency
// has no reason, if the idem modules are required at more than one version,
// or if a package of any module, tests aside, depends on a banned module.
//
//	go run ./deps -dir ..          # make deps: rewrite the file
//	go run ./deps -dir .. -check   # make deps-check (CI): and fail if it was stale
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/idem-go/idem/scripts/internal/modtree"
)

// banned are the modules no package of any idem module may depend on, and why.
var banned = map[string]string{
	"gopkg.in/yaml.v3": "archived; go.yaml.in/yaml/v3 is its continuation",
}

const doc = "docs/dependencies.md"

func main() {
	dir := flag.String("dir", ".", "the repository's root")
	check := flag.Bool("check", false, "do not write "+doc+"; fail if it is stale")
	flag.Parse()
	if err := run(*dir, *check); err != nil {
		fmt.Fprintln(os.Stderr, "deps:", err)
		os.Exit(1)
	}
}

func run(dir string, check bool) error {
	mods, err := modtree.Find(dir)
	if err != nil {
		return err
	}
	old, err := os.ReadFile(filepath.Join(dir, doc))
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	why := parse(old)
	var problems []string
	versions := map[string][]string{}
	var out bytes.Buffer
	out.WriteString(header())
	for _, m := range mods {
		build, bannedBy, err := golist(filepath.Join(dir, m.Dir), false)
		if err != nil {
			return err
		}
		tests, _, err := golist(filepath.Join(dir, m.Dir), true)
		if err != nil {
			return err
		}
		problems = append(problems, bannedBy...)
		fmt.Fprintf(&out, "\n## %s", m.Path)
		if !m.Released {
			out.WriteString(" (not released)")
		}
		out.WriteString("\n\n| dependency | used by | why |\n|---|---|---|\n")
		for _, r := range m.File.Require {
			if r.Indirect {
				continue
			}
			if strings.HasPrefix(r.Mod.Path, modtree.Prefix) {
				versions[r.Mod.Version] = append(versions[r.Mod.Version], m.Dir+"/go.mod")
			}
			use := "other build tags"
			switch {
			case build[r.Mod.Path]:
				use = "packages"
			case tests[r.Mod.Path]:
				use = "tests"
			}
			reason := why[m.Path][r.Mod.Path]
			if reason == "" {
				reason = "?"
				problems = append(problems, fmt.Sprintf("%s: %s has no reason: write it in %s (the row is there)", m.Path, r.Mod.Path, doc))
			}
			fmt.Fprintf(&out, "| %s | %s | %s |\n", r.Mod.Path, use, reason)
		}
	}
	if len(versions) > 1 {
		var vs []string
		for v, files := range versions {
			sort.Strings(files)
			vs = append(vs, fmt.Sprintf("%s in %s", v, strings.Join(files, ", ")))
		}
		sort.Strings(vs)
		problems = append(problems, "the idem modules are required at more than one version ("+strings.Join(vs, "; ")+
			"): cd scripts && go run ./release -rewrite requires -dir .. -version <the last release>")
	}
	if check && !bytes.Equal(old, out.Bytes()) {
		problems = append(problems, doc+" is stale: run make deps")
	}
	if !check && !bytes.Equal(old, out.Bytes()) {
		if err := os.WriteFile(filepath.Join(dir, doc), out.Bytes(), 0o644); err != nil {
			return err
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("\n\t%s", strings.Join(problems, "\n\t"))
	}
	return nil
}

func header() string {
	var b strings.Builder
	b.WriteString(`# Dependencies

Each module's direct dependencies: whether its packages use them (what a
dependent builds), only its tests, or neither on linux (other build tags),
and why each is there. ` + "`make deps`" + ` rewrites this file from the go.mod
files and keeps the reasons, which are written here by hand;
` + "`make deps-check`" + ` (CI) fails if it is stale, if a direct dependency has
no reason, if the idem modules are required at more than one version
(docs/release.md), or if a package of any module, tests aside, depends on
one of these modules (` + "`go list -deps`" + `):

`)
	var names []string
	for name := range banned {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "- %s: %s.\n", name, banned[name])
	}
	return b.String()
}

// parse reads the reasons of a previous docs/dependencies.md, by module and
// dependency.
func parse(data []byte) map[string]map[string]string {
	why := map[string]map[string]string{}
	module := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "## "); ok {
			module = strings.Fields(rest + " ")[0]
			why[module] = map[string]string{}
			continue
		}
		cells := strings.Split(line, " | ")
		if module == "" || len(cells) != 3 || !strings.HasPrefix(line, "| ") || !strings.HasSuffix(line, " |") {
			continue
		}
		dep, reason := strings.TrimPrefix(cells[0], "| "), strings.TrimSuffix(cells[2], " |")
		if reason != "?" && reason != "why" {
			why[module][dep] = reason
		}
	}
	return why
}

// golist returns the modules providing the packages that the module in dir
// builds (with tests: and its tests, any build tag of the repository's), and,
// without tests, a line for each package that imports a banned module.
func golist(dir string, tests bool) (map[string]bool, []string, error) {
	args := []string{"list", "-deps", "-f", "{{.ImportPath}}\t{{with .Module}}{{.Path}}{{end}}\t{{join .Imports \" \"}}"}
	if tests {
		args = append(args, "-test", "-tags", "integration")
	}
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, nil, fmt.Errorf("go list in %s: %v: %s", dir, err, stderr.String())
	}
	mods := map[string]bool{}
	pkgMod := map[string]string{}
	var lines [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 3 {
			continue
		}
		mods[f[1]] = true
		pkgMod[f[0]] = f[1]
		lines = append(lines, f)
	}
	var found []string
	for _, f := range lines {
		for _, imp := range strings.Fields(f[2]) {
			if m := pkgMod[imp]; banned[m] != "" && banned[pkgMod[f[0]]] == "" {
				found = append(found, fmt.Sprintf("%s imports %s (%s: %s)", f[0], imp, m, banned[m]))
			}
		}
	}
	return mods, found, nil
}
