package admin

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/core"
)

// DefaultInFlightLimit and MaxInFlightLimit bound the keys GET inflight
// lists: ?limit=N, default and maximum.
const (
	DefaultInFlightLimit = 100
	MaxInFlightLimit     = 1000
)

// DefaultTimeout bounds the store calls of each Handler request, as
// idemprom's stuck-keys gauge bounds its InFlight: a store that is down is
// a 503 within it.
const DefaultTimeout = 5 * time.Second

// Handler serves the admin operations on store as a JSON API, under any
// prefix (it reads the last segment of the path):
//
//	GET  …/inspect?scope=S&key=K[&route=R][&body=1]   or ?id=ID: a Key
//	POST …/purge    (same parameters, query or JSON):  {"id": …, "purged": true}
//	POST …/unlock   (same parameters):                 {"id": …, "unlocked": true}
//	GET  …/inflight[?limit=N]:                         a KeyList, oldest first
//
// An unlock drops the lock whoever holds it: if its request is still
// running (a slow handler, not a dead one), a retry then runs the handler
// a second time, a doubled effect; idemctl asks for -yes, the handler asks
// nothing, so let only operators who check the key's age (inflight) call
// it. A purge is refused while the key is in flight.
//
// Every request must pass authorize first: 403 for all of them if it is nil,
// 401 (with WWW-Authenticate: Bearer) when it returns false. Stored headers
// and bodies (body=1) also need WithBodyAuthorizer's: 403 without. A purge
// or an unlock takes its parameters from the query or a JSON object body
// ({"scope": …, "key": …}); any other body (a form: what a cross-site page
// can post) is 415, and a browser's cross-origin request (Sec-Fetch-Site,
// Origin: http.CrossOriginProtection) 403, whatever credentials it carries.
// Errors are problem details (application/problem+json): 400 bad
// parameters, 404 not found, 405 wrong method, 409 in flight (purge), 413
// a body over 64 KiB, 503 store error or DefaultTimeout passed (WithTimeout).
// It panics if store is nil.
func Handler(store core.Admin, authorize func(*http.Request) bool, opts ...Option) http.Handler {
	if store == nil {
		panic("admin: Handler with a nil store")
	}
	h := &handler{store: store, authorize: authorize, csrf: http.NewCrossOriginProtection(), timeout: DefaultTimeout}
	for _, o := range opts {
		o(h)
	}
	return h
}

// An Option configures Handler.
type Option func(*handler)

// WithBodyAuthorizer lets the requests that authorize accepts, besides
// Handler's authorizer, read stored headers and bodies (inspect with
// body=1): card numbers, tokens, of every scope. Without it none may.
func WithBodyAuthorizer(authorize func(*http.Request) bool) Option {
	return func(h *handler) { h.authorizeBodies = authorize }
}

// WithTimeout bounds the store calls of each request by d instead of
// DefaultTimeout (0: by the request's context alone). Raise it for an
// inflight that scans a large Redis.
func WithTimeout(d time.Duration) Option {
	return func(h *handler) { h.timeout = d }
}

// WithSealer lets the handler open the records that s sealed (the
// Engine's core.Config.Sealer), to show their scope, key and code, and,
// with the body permission, headers and body. Without it, a sealed record
// shows its times and key id only. With it, a record stored in clear shows
// with an Error (see Inspect), even one that the Engine still accepts
// before its Config.ClearRecordsUntil.
func WithSealer(s core.Sealer) Option {
	return func(h *handler) { h.sealer = s }
}

// BearerToken returns an authorizer for Handler that accepts requests with
// "Authorization: Bearer <token>", compared in constant time. An empty token
// accepts nothing.
func BearerToken(token string) func(*http.Request) bool {
	want := sha256.Sum256([]byte(token))
	return func(r *http.Request) bool {
		scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
			return false
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(got)))
		return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
	}
}

type handler struct {
	store           core.Admin
	authorize       func(*http.Request) bool
	authorizeBodies func(*http.Request) bool
	sealer          core.Sealer
	csrf            *http.CrossOriginProtection
	timeout         time.Duration
}

// maxFormBytes bounds a POST body: a few parameters in JSON.
const maxFormBytes = 64 << 10

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	switch {
	case h.authorize == nil:
		problem(w, http.StatusForbidden, "the admin handler has no authorizer: every request is refused")
		return
	case !h.authorize(r):
		w.Header().Set("WWW-Authenticate", `Bearer realm="idem admin"`)
		problem(w, http.StatusUnauthorized, "not authorized")
		return
	}
	op := path.Base(r.URL.Path)
	method := http.MethodPost
	if op == "inspect" || op == "inflight" {
		method = http.MethodGet
	} else if op != "purge" && op != "unlock" {
		problem(w, http.StatusNotFound, "no such operation: "+op+" (inspect, purge, unlock, inflight)")
		return
	}
	if r.Method != method && !(method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", method)
		problem(w, http.StatusMethodNotAllowed, op+" takes "+method)
		return
	}
	if err := h.csrf.Check(r); err != nil {
		problem(w, http.StatusForbidden, "cross-origin request refused: "+err.Error())
		return
	}
	query := r.URL.Query()
	target := targetOf(query.Get)
	if method == http.MethodPost {
		if status, err := readTarget(w, r, &target); err != nil {
			problem(w, status, err.Error())
			return
		}
	}
	ctx := r.Context()
	if h.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	if op == "inflight" {
		limit := DefaultInFlightLimit
		if s := query.Get("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > MaxInFlightLimit {
				problem(w, http.StatusBadRequest, "limit must be 1 to "+strconv.Itoa(MaxInFlightLimit))
				return
			}
			limit = n
		}
		keys, err := InFlight(ctx, h.store, limit)
		if err != nil {
			storeProblem(w, err)
			return
		}
		writeJSON(w, http.StatusOK, KeyList{Keys: keys})
		return
	}
	id, err := target.StoreKey()
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	switch op {
	case "inspect":
		body, _ := strconv.ParseBool(query.Get("body"))
		if body && (h.authorizeBodies == nil || !h.authorizeBodies(r)) {
			problem(w, http.StatusForbidden, "reading stored headers and bodies needs the body authorizer's permission")
			return
		}
		k, err := Inspect(ctx, h.store, id, body, h.sealer)
		if err != nil {
			storeProblem(w, err)
			return
		}
		writeJSON(w, http.StatusOK, k)
	case "purge":
		if err := h.store.Purge(ctx, id); err != nil {
			storeProblem(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "purged": true})
	case "unlock":
		if err := h.store.Unlock(ctx, id); err != nil {
			storeProblem(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "unlocked": true})
	}
}

// targetOf reads a Target from parameters named scope, key, route and id.
func targetOf(get func(name string) string) Target {
	return Target{Scope: get("scope"), Key: get("key"), Route: get("route"), ID: get("id")}
}

// readTarget reads the JSON body of an unsafe request, if it has one, into
// t (its fields win over the query's), and returns the status of a body
// that is not one.
func readTarget(w http.ResponseWriter, r *http.Request, t *Target) (int, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxFormBytes))
	if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
		return http.StatusRequestEntityTooLarge, fmt.Errorf("a body over %d bytes: send a few parameters", tooLarge.Limit)
	} else if err != nil {
		return http.StatusBadRequest, err
	}
	ct := r.Header.Get("Content-Type")
	if len(b) == 0 && ct == "" {
		return 0, nil
	}
	if mt, _, _ := mime.ParseMediaType(ct); mt != "application/json" {
		return http.StatusUnsupportedMediaType, fmt.Errorf("a body of type %q: send the parameters in the query or as application/json", ct)
	}
	var body struct{ Scope, Key, Route, ID *string }
	if err := json.Unmarshal(b, &body); err != nil {
		return http.StatusBadRequest, fmt.Errorf("JSON body: %w", err)
	}
	for _, f := range []struct{ from, to *string }{{body.Scope, &t.Scope}, {body.Key, &t.Key}, {body.Route, &t.Route}, {body.ID, &t.ID}} {
		if f.from != nil {
			*f.to = *f.from
		}
	}
	return 0, nil
}

func storeProblem(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, core.ErrNotFound):
		problem(w, http.StatusNotFound, "key not found")
	case errors.Is(err, core.ErrInFlight) && err != core.ErrInFlight:
		problem(w, http.StatusConflict, err.Error()) // the store says more: who holds it
	case errors.Is(err, core.ErrInFlight):
		problem(w, http.StatusConflict, "key in flight: a request holds its lock")
	default:
		problem(w, http.StatusServiceUnavailable, "store error: "+err.Error())
	}
}

func problem(w http.ResponseWriter, status int, detail string) {
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]any{ //nolint:errcheck // the client went away
		"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail,
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the client went away
}
