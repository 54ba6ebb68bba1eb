package exampleapp

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/idem-go/idem/core"
)

// CORS is the examples' answer to browsers (docs/contract.md, "Browsers and
// CORS"): the origin of $CORS_ORIGIN may send the key header and read the
// replay headers. Each example hands these fields to its framework's CORS
// middleware; net/http has none, and uses Handler.
type CORS struct {
	// Origin is $CORS_ORIGIN, e.g. http://127.0.0.1:8099; empty: no CORS.
	Origin string
	// Methods are the methods a page of Origin may use.
	Methods []string
	// AllowHeaders are the request headers it may send: Content-Type, the
	// user header and the key headers.
	AllowHeaders []string
	// ExposeHeaders are the response headers it may read beyond the
	// safelisted ones: the replay marker, Retry-After of a 409, the body
	// omitted marker and Location.
	ExposeHeaders []string
	// MaxAge is how long, in seconds, a browser may cache a preflight.
	MaxAge int
}

// corsFor returns the CORS of origin for an Engine of cfg.
func corsFor(origin string, cfg core.Config) CORS {
	allow := []string{"Content-Type", UserHeader, cfg.KeyHeader}
	if cfg.LegacyKeyHeader != "-" {
		allow = append(allow, cfg.LegacyKeyHeader)
	}
	return CORS{
		Origin:        origin,
		Methods:       []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete},
		AllowHeaders:  allow,
		ExposeHeaders: []string{core.HeaderReplay, "Retry-After", core.HeaderBodyOmitted, core.HeaderOriginalTimestamp, "Location"},
		MaxAge:        600,
	}
}

// Handler answers CORS for c.Origin around next, for net/http: a preflight
// (OPTIONS with Origin and Access-Control-Request-Method) of that origin
// gets 204 with the allowed methods and headers and never reaches next;
// another request of that origin reaches next with Access-Control-Allow-Origin
// and Access-Control-Expose-Headers set. Requests of other origins pass
// untouched, and the browser refuses them their answers. With no Origin,
// Handler returns next.
func (c CORS) Handler(next http.Handler) http.Handler {
	if c.Origin == "" {
		return next
	}
	methods, allow, expose := strings.Join(c.Methods, ", "), strings.Join(c.AllowHeaders, ", "), strings.Join(c.ExposeHeaders, ", ")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Add("Vary", "Origin")
		if r.Header.Get("Origin") != c.Origin {
			next.ServeHTTP(w, r)
			return
		}
		h.Set("Access-Control-Allow-Origin", c.Origin)
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			h.Add("Vary", "Access-Control-Request-Method")
			h.Add("Vary", "Access-Control-Request-Headers")
			h.Set("Access-Control-Allow-Methods", methods)
			h.Set("Access-Control-Allow-Headers", allow)
			h.Set("Access-Control-Max-Age", strconv.Itoa(c.MaxAge))
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.Set("Access-Control-Expose-Headers", expose)
		next.ServeHTTP(w, r)
	})
}
