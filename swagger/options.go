package swagger

import (
	"slices"
	"strings"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/swagger/route"
)

// Options says what to document and on which operations. The zero value
// documents the Engine's defaults on every POST, PUT, PATCH and DELETE
// operation; OptionsFor derives Options from an Engine's configuration.
type Options struct {
	// KeyHeader is the request header carrying the key.
	// Default: core.DefaultKeyHeader.
	KeyHeader string
	// Required documents the header as required, as it is when the Engine's
	// Config.Required is set. Default: false.
	Required bool
	// MaxKeyLength is the documented maxLength of the key.
	// Default: core.DefaultMaxKeyLength.
	MaxKeyLength int
	// MaxBodyBytes is the body size past which a request with a key gets
	// 413, as the Engine's Config.MaxBodyBytes. Default:
	// core.DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// ResponseTTL is how long a key's response is kept, as the Engine's
	// Config.ResponseTTL: the header's description says it, and its
	// x-idempotency-ttl-seconds extension gives it in seconds (the draft
	// asks a resource to publish its expiry policy).
	// Default: core.DefaultResponseTTL.
	ResponseTTL time.Duration
	// ReplayHeader is the response header that marks a replay, as the
	// Engine's Config.ReplayHeader. Default: core.HeaderReplay.
	ReplayHeader string
	// FailClosed documents the 503 (store-unavailable) that an Engine with
	// Config.FailClosed answers when its store fails. Default: false.
	FailClosed bool
	// Storable is the Engine's store policy (Config.Storable): the
	// documented responses whose status it stores get the replay header.
	// Default: core.DefaultStorable.
	Storable func(status int) bool
	// Methods are the covered methods; an operation with another method is
	// left untouched. Default: core.DefaultMethods.
	Methods []string
	// Operations, when not nil, are the only covered operations (those of
	// them whose method is in Methods). Paths may be written in a
	// framework's syntax (see NormalizePath) and are full paths, as a router
	// reports them: they are matched against BasePath joined with the
	// document's path, ignoring the names of path parameters and a trailing
	// slash. Default: nil, every operation whose method is in Methods.
	Operations []Operation
	// BasePath is the prefix of every path of the document, used to match
	// Operations. Default: the document's basePath (Swagger 2.0) or the path
	// of its first server URL (OpenAPI 3). A swag template's basePath is the
	// action {{.BasePath}}, which cannot be read: pass
	// docs.SwaggerInfo.BasePath here. Write "/" for no prefix.
	BasePath string
}

// Operation is one covered route: a method and a path (see package route).
type Operation = route.Operation

// OptionsFor returns the Options that document an Engine with configuration
// cfg (from Engine.Config, which has its defaults filled in). With no ops,
// every operation whose method the Engine covers is documented; otherwise
// only ops are (an adapter passes the routes its middleware covers).
func OptionsFor(cfg core.Config, ops ...Operation) Options {
	return Options{
		KeyHeader:    cfg.KeyHeader,
		Required:     cfg.Required,
		MaxKeyLength: cfg.MaxKeyLength,
		MaxBodyBytes: cfg.MaxBodyBytes,
		ResponseTTL:  cfg.ResponseTTL,
		ReplayHeader: cfg.ReplayHeader,
		FailClosed:   cfg.FailClosed,
		Storable:     cfg.Storable,
		Methods:      slices.Clone(cfg.Methods), // empty, not nil, when the Engine covers nothing
		Operations:   ops,
	}
}

// joinBase joins a base path (or a URL, whose path is taken) and a path.
func joinBase(base, p string) string {
	if i := strings.Index(base, "://"); i >= 0 {
		base = base[i+3:]
		if j := strings.IndexByte(base, '/'); j >= 0 {
			base = base[j:]
		} else {
			base = ""
		}
	}
	return strings.TrimRight(base, "/") + "/" + strings.TrimLeft(p, "/")
}

// filled returns o with its defaults filled in.
func (o Options) filled() Options {
	if o.KeyHeader == "" {
		o.KeyHeader = core.DefaultKeyHeader
	}
	if o.MaxKeyLength == 0 {
		o.MaxKeyLength = core.DefaultMaxKeyLength
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = core.DefaultMaxBodyBytes
	}
	if o.ResponseTTL == 0 {
		o.ResponseTTL = core.DefaultResponseTTL
	}
	if o.ReplayHeader == "" {
		o.ReplayHeader = core.HeaderReplay
	}
	if o.Storable == nil {
		o.Storable = core.DefaultStorable
	}
	if o.Methods == nil {
		o.Methods = core.DefaultMethods
	}
	return o
}
