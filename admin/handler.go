package admin

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"path"
	"strconv"
	"strings"

	"github.com/idem-go/idem/core"
)

// DefaultInFlightLimit and MaxInFlightLimit bound the keys GET inflight
// lists: ?limit=N, default and maximum.
const (
	DefaultInFlightLimit = 100
	MaxInFlightLimit     = 1000
)

// Handler serves the admin operations on store as a JSON API, under any
// prefix (it reads the last segment of the path):
//
//	GET  …/inspect?scope=S&key=K[&route=R][&body=1]   or ?id=ID: a Key
//	POST …/purge    (same parameters, query or form):  {"id": …, "purged": true}
//	POST …/unlock   (same parameters):                 {"id": …, "unlocked": true}
//	GET  …/inflight[?limit=N]:                         a KeyList, oldest first
//
// Every request must pass authorize first: 403 for all of them if it is nil,
// 401 (with WWW-Authenticate: Bearer) when it returns false. Errors are
// problem details (application/problem+json): 400 bad parameters, 404 not
// found, 405 wrong method, 409 in flight (purge), 503 store error.
func Handler(store core.Admin, authorize func(*http.Request) bool) http.Handler {
	return &handler{store: store, authorize: authorize}
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
	store     core.Admin
	authorize func(*http.Request) bool
}

// maxFormBytes bounds a POST body: a few parameters.
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
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBytes)
	if err := r.ParseForm(); err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx := r.Context()
	if op == "inflight" {
		limit := DefaultInFlightLimit
		if s := r.Form.Get("limit"); s != "" {
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
	id, err := targetOf(r.Form.Get).StoreKey()
	if err != nil {
		problem(w, http.StatusBadRequest, err.Error())
		return
	}
	switch op {
	case "inspect":
		body, _ := strconv.ParseBool(r.Form.Get("body"))
		k, err := Inspect(ctx, h.store, id, body)
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

func storeProblem(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, core.ErrNotFound):
		problem(w, http.StatusNotFound, "key not found")
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
