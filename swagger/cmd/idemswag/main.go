// Command idemswag documents the idempotency key in the swagger.json and
// swagger.yaml files that swag init writes (or any Swagger 2.0 or OpenAPI 3
// file), rewriting them in place. Add it as a tool of your module
// (go get -tool github.com/idem-go/idem/swagger/cmd/idemswag@latest) and run
// it after swag init:
//
//	//go:generate swag init
//	//go:generate go tool idemswag -dir docs -required -op "POST /api/v1/orders"
//
// Flags:
//
//	-dir dir            directory of swagger.json and swagger.yaml (default docs)
//	-files a,b          files to rewrite instead; each must exist
//	-key-header name    key header (default Idempotency-Key)
//	-required           document the header as required (Config.Required)
//	-max-key-length n   documented maximum key length (default 255)
//	-max-body-bytes n   body size past which the 413 is documented (default 1048576)
//	-ttl duration       how long a key's response is kept (default 24h)
//	-replay-header name response header that marks a replay (default X-Idempotency-Replay)
//	-fail-closed        say that the 503 also answers a store failure (Config.FailClosed)
//	-quota              document the 429 of a key over the quota (Config.Quota)
//	-methods list       covered methods (default POST,PUT,PATCH,DELETE)
//	-op "METHOD /path"  a covered operation, repeatable; full route path in any
//	                    router's syntax; without -op, every operation of a
//	                    covered method is covered. An -op that matches no
//	                    operation of a file is an error (a typo, a wrong
//	                    -base-path, a route gone from the docs), and no file
//	                    is rewritten
//	-base-path path     prefix of the document's paths (default its basePath)
//
// The flags mirror the Engine's Config; keep them in step with it. The
// store policy (Config.Storable) is a function, so the files document the
// default one (core.DefaultStorable) on the replay header; an Engine with
// another policy documents it at run time through swagger.OptionsFor. The
// template in docs/docs.go is left alone: rewrite it at run time with
// swagger.InjectTemplate.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/defaults"
	"github.com/idem-go/idem/swagger"
	"github.com/idem-go/idem/swagger/route"
)

// errUsage reports bad flags, which the flag package has printed already.
var errUsage = errors.New("usage")

func main() {
	err := run(os.Args[1:], os.Stderr)
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
	case errors.Is(err, errUsage):
		os.Exit(2)
	default:
		fmt.Fprintln(os.Stderr, "idemswag:", err)
		os.Exit(1)
	}
}

// operations is the repeatable -op flag.
type operations []swagger.Operation

func (o *operations) String() string { return fmt.Sprint(*o) }

func (o *operations) Set(s string) error {
	op, err := route.Parse(s)
	if err != nil {
		return err
	}
	*o = append(*o, op)
	return nil
}

func run(args []string, stderr io.Writer) error {
	fset := flag.NewFlagSet("idemswag", flag.ContinueOnError)
	fset.SetOutput(stderr)
	var (
		opts    swagger.Options
		ops     operations
		dir     = fset.String("dir", "docs", "directory of swagger.json and swagger.yaml")
		files   = fset.String("files", "", "comma-separated files to rewrite instead of those in -dir")
		methods = fset.String("methods", strings.Join(defaults.Methods(), ","), "comma-separated covered methods")
	)
	fset.StringVar(&opts.KeyHeader, "key-header", defaults.KeyHeader, "key header")
	fset.BoolVar(&opts.Required, "required", false, "document the key header as required")
	fset.IntVar(&opts.MaxKeyLength, "max-key-length", defaults.MaxKeyLength, "documented maximum key length")
	fset.DurationVar(&opts.ResponseTTL, "ttl", defaults.ResponseTTL, "how long a key's response is kept (Config.ResponseTTL)")
	fset.StringVar(&opts.ReplayHeader, "replay-header", core.HeaderReplay, "response header that marks a replay")
	fset.BoolVar(&opts.FailClosed, "fail-closed", false, "say that the 503 also answers a store failure (Config.FailClosed)")
	fset.BoolVar(&opts.Quota, "quota", false, "document the 429 of a key over the quota")
	fset.Int64Var(&opts.MaxBodyBytes, "max-body-bytes", defaults.MaxBodyBytes, "body size past which the 413 is documented")
	fset.StringVar(&opts.BasePath, "base-path", "", "prefix of the document's paths (default: its basePath or server URL)")
	fset.Var(&ops, "op", `covered operation "METHOD /path", repeatable (default: every operation of a covered method)`)
	if err := fset.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	switch {
	case fset.NArg() > 0:
		return fmt.Errorf("unexpected arguments %q", fset.Args())
	case opts.MaxKeyLength < 1, opts.MaxBodyBytes < 1, opts.ResponseTTL < time.Second:
		return errors.New("-max-key-length and -max-body-bytes must be positive, -ttl at least 1s")
	}
	opts.Methods = nil
	for _, m := range strings.Split(*methods, ",") { // "POST, PUT" too
		if m = strings.ToUpper(strings.TrimSpace(m)); m != "" {
			opts.Methods = append(opts.Methods, m)
		}
	}
	if len(ops) > 0 {
		opts.Operations = ops
	}

	paths := []string{filepath.Join(*dir, "swagger.json"), filepath.Join(*dir, "swagger.yaml")}
	optional := *files == ""
	if !optional {
		paths = nil
		for _, p := range strings.Split(*files, ",") {
			if p = strings.TrimSpace(p); p != "" {
				paths = append(paths, p)
			}
		}
	}
	var docs []file
	for _, path := range paths {
		f, err := prepare(path, opts)
		switch {
		case optional && errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		}
		docs = append(docs, f)
	}
	if len(docs) == 0 {
		return fmt.Errorf("no swagger.json or swagger.yaml in %s (run swag init first)", *dir)
	}
	for _, f := range docs {
		if f.changed() {
			if err := os.WriteFile(f.path, f.out, f.perm); err != nil {
				return err
			}
		}
	}
	return nil
}

// file is a document and what Inject made of it.
type file struct {
	path    string
	perm    fs.FileMode
	in, out []byte
}

func (f file) changed() bool { return !bytes.Equal(f.in, f.out) }

// prepare reads the document at path and injects into it, checking that
// every operation of opts.Operations matches one of its operations.
func prepare(path string, opts swagger.Options) (file, error) {
	info, err := os.Stat(path)
	if err != nil {
		return file{}, err
	}
	in, err := os.ReadFile(path)
	if err != nil {
		return file{}, err
	}
	out, err := swagger.Inject(in, opts)
	if err != nil {
		return file{}, fmt.Errorf("%s: %w", path, err)
	}
	// Inject skips an operation it does not find, as it must at run time
	// (an adapter reports routes the docs may leave out). Here an -op was
	// asked for by name: probe each alone with a header name no document
	// has, which edits the document if and only if the -op matches. The
	// probe is compared with the document injected on no operation, which
	// has gone through the same encoding (YAML indentation, JSON escapes).
	if len(opts.Operations) > 0 {
		none := opts
		none.Operations = []swagger.Operation{}
		base, err := swagger.Inject(in, none)
		if err != nil {
			return file{}, fmt.Errorf("%s: %w", path, err)
		}
		for _, op := range opts.Operations {
			probe := opts
			probe.KeyHeader = "X-Idemswag-Probe"
			probe.Operations = []swagger.Operation{op}
			got, err := swagger.Inject(in, probe)
			if err != nil {
				return file{}, fmt.Errorf("%s: %w", path, err)
			}
			if bytes.Equal(got, base) {
				return file{}, fmt.Errorf("%s: -op %q matches no covered operation (check the method against -methods, the path against -base-path)",
					path, strings.TrimSpace(op.Method+" "+op.Path))
			}
		}
	}
	return file{path: path, perm: info.Mode().Perm(), in: in, out: out}, nil
}
