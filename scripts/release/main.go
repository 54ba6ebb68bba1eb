// Command release prepares a release of every idem module at one version.
// It sets every requirement on an idem module to that version and commits;
// commits the released modules' go.mod files without their replace lines and
// tags that commit for each released module (v0.1.0, ginidem/v0.1.0, ...),
// in dependency order; then commits the replace lines back. It refuses a
// dirty tree and an existing tag, and never pushes.
//
//	go run ./release -version v0.1.0 -dir ..   # make release VERSION=v0.1.0
//	go run ./release -version v0.1.0 -dir .. -rewrite requires   # the requirements only, no git
//	go run ./release -version v0.1.0 -dir DIR -rewrite tagged    # go.mod files as tagged, no git
//
// docs/release.md has the scheme and the steps after it.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/idem-go/idem/scripts/internal/modtree"
)

func main() {
	version := flag.String("version", "", "the version of every module, like v0.1.0")
	dir := flag.String("dir", ".", "the repository's root")
	rewrite := flag.String("rewrite", "",
		`only rewrite the go.mod files, without git: "requires" (the requirements) or "tagged" (also no replace lines, as tagged)`)
	flag.Parse()
	if err := run(*dir, *version, *rewrite); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(dir, version, rewrite string) (err error) {
	if err := modtree.CheckVersion(version); err != nil {
		return err
	}
	if rewrite != "" && rewrite != "requires" && rewrite != "tagged" {
		return fmt.Errorf("-rewrite %q: want requires or tagged", rewrite)
	}
	rewriteOnly := rewrite != ""
	if !rewriteOnly {
		status, err := git(dir, "status", "--porcelain")
		if err != nil {
			return err
		}
		if status != "" {
			return fmt.Errorf("the working tree is not clean; commit or stash first:\n%s", status)
		}
	}
	mods, err := modtree.Find(dir)
	if err != nil {
		return err
	}
	order, err := modtree.Released(mods)
	if err != nil {
		return err
	}
	if !rewriteOnly {
		for _, m := range order {
			if out, _ := git(dir, "tag", "--list", m.Tag(version)); out != "" {
				return fmt.Errorf("tag %s exists", m.Tag(version))
			}
		}
	}
	if !rewriteOnly {
		var start string
		if start, err = git(dir, "rev-parse", "HEAD"); err != nil {
			return err
		}
		defer func() {
			if err != nil {
				err = fmt.Errorf("%w\nundo with: git reset --hard %s, and git tag -d for the tags above", err, start)
			}
		}()
	}
	changed, err := modtree.Rewrite(dir, mods, version)
	if err != nil {
		return err
	}
	if !rewriteOnly && len(changed) > 0 {
		if err := commit(dir, changed, "release: "+version+": every module requires the idem modules at "+version); err != nil {
			return err
		}
	}
	if rewrite == "requires" {
		return nil
	}
	dropped, err := modtree.DropReplaces(dir, mods)
	if err != nil || rewriteOnly {
		return err
	}
	if len(dropped) > 0 {
		if err := commit(dir, dropped, "release: "+version+": the tagged tree, without replace lines"); err != nil {
			return err
		}
	}
	var tags []string
	for _, m := range order {
		tag := m.Tag(version)
		if _, err := git(dir, "tag", "-a", tag, "-m", m.Path+" "+version); err != nil {
			return err
		}
		tags = append(tags, tag)
		fmt.Println("tagged", tag)
	}
	if len(dropped) > 0 {
		var files []string
		for _, m := range dropped {
			files = append(files, goMod(m))
		}
		if _, err := git(dir, append([]string{"checkout", "HEAD~1", "--"}, files...)...); err != nil {
			return err
		}
		if err := commit(dir, dropped, "after "+version+": the replace lines back, for builds inside the repository"); err != nil {
			return err
		}
	}
	fmt.Printf("\n%d modules tagged, nothing pushed. Publish the branch and the tags (the root module's first):\n\n\tgit push origin HEAD %s\n",
		len(tags), strings.Join(tags, " "))
	return nil
}

func goMod(m *modtree.Module) string { return filepath.ToSlash(filepath.Join(m.Dir, "go.mod")) }

// commit commits the go.mod files of mods.
func commit(dir string, mods []*modtree.Module, msg string) error {
	args := []string{"commit", "-q", "-m", msg, "--"}
	for _, m := range mods {
		args = append(args, goMod(m))
	}
	_, err := git(dir, args...)
	return err
}

// git runs git in dir and returns its trimmed output.
func git(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return strings.TrimSpace(out.String()), nil
}
