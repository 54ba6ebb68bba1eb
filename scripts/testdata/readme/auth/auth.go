// Package auth stands for the app's authentication package of the README's
// "Use" block: Middleware puts the user in the request's context, UserFrom
// reads it.
package auth

import (
	"context"
	"net/http"
)

type userKey struct{}

// Middleware puts the X-User-ID header's user in the request's context (a
// stand-in: a real one checks a credential).
func Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, r.Header.Get("X-User-ID"))))
	})
}

// UserFrom returns the user Middleware put in ctx, "" if none.
func UserFrom(ctx context.Context) string {
	u, _ := ctx.Value(userKey{}).(string)
	return u
}
