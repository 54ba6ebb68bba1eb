package swagger

import (
	"slices"
	"strings"
	"time"

	"github.com/idem-go/idem/core"
	"github.com/idem-go/idem/internal/defaults"
	"github.com/idem-go/idem/swagger/route"
)

// Options says what to document and on which operations. The zero value
// documents the Engine's defaults on every POST, PUT, PATCH and DELETE
// operation; OptionsFor derives Options from an Engine's configuration.
type Options struct {
	// KeyHeader is the request header carrying the key.
	// Default: "Idempotency-Key".
	KeyHeader string
	// Required documents the header as required, as it is when the Engine's
	// Config.Required is set. Default: false.
	Required bool
	// MaxKeyLength is the documented maxLength of the key.
	// Default: 255.
	MaxKeyLength int
	// MaxBodyBytes is the body size past which a request with a key gets
	// 413, as the Engine's Config.MaxBodyBytes. Default:
	// 1 MiB.
	MaxBodyBytes int64
	// ResponseTTL, the Engine's Config.ResponseTTL, is published in the
	// header's description and its x-idempotency-ttl-seconds extension.
	// Default: 24 hours.
	ResponseTTL time.Duration
	// ReplayHeader is the response header that marks a replay, as the
	// Engine's Config.ReplayHeader. Default: core.HeaderReplay.
	ReplayHeader string
	// FailClosed says in the 503's description (store-unavailable) that
	// the Engine, with Config.FailClosed, also answers it when its store
	// fails. The 503 is documented either way: a busy transactional store
	// and a record that does not decode or open are answered 503 in both
	// modes. Default: false.
	FailClosed bool
	// Quota documents the 429 (quota-exceeded) that an Engine with a
	// Config.Quota answers to a new key over it. Default: false.
	Quota bool
	// Storable is the Engine's store policy (Config.Storable): the
	// documented responses whose status it stores get the replay header.
	// Default: core.DefaultStorable.
	Storable func(status int) bool
	// Methods are the covered methods; an operation with another method is
	// left untouched. Default: POST, PUT, PATCH and DELETE.
	Methods []string
	// Operations, when not nil, are the only covered operations: full paths
	// in any router's syntax (route.Normalize), matched against BasePath
	// joined with the document's path. Default: nil, every one in Methods.
	Operations []Operation
	// BasePath prefixes the document's paths to match Operations ("/" for
	// none); pass docs.SwaggerInfo.BasePath for a swag template. Default: its
	// basePath (Swagger 2.0) or its first server URL's path (OpenAPI 3).
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
		Quota:        cfg.Quota.InFlight > 0 || cfg.Quota.PerWindow > 0,
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
		o.KeyHeader = defaults.KeyHeader
	}
	if o.MaxKeyLength == 0 {
		o.MaxKeyLength = defaults.MaxKeyLength
	}
	if o.MaxBodyBytes == 0 {
		o.MaxBodyBytes = defaults.MaxBodyBytes
	}
	if o.ResponseTTL == 0 {
		o.ResponseTTL = defaults.ResponseTTL
	}
	if o.ReplayHeader == "" {
		o.ReplayHeader = core.HeaderReplay
	}
	if o.Storable == nil {
		o.Storable = core.DefaultStorable
	}
	if o.Methods == nil {
		o.Methods = defaults.Methods()
	}
	return o
}
