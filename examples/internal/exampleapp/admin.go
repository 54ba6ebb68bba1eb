package exampleapp

import (
	"os"

	"github.com/idem-go/idem/admin"
	"github.com/idem-go/idem/core"
)

// AdminPath is where Ops serves the admin handler (package admin) when
// IDEM_ADMIN_TOKEN is set: inspect, purge, unlock and inflight, behind
// "Authorization: Bearer $IDEM_ADMIN_TOKEN".
const AdminPath = "/admin/idempotency/"

// mountAdmin serves the admin handler on Ops if IDEM_ADMIN_TOKEN is set.
func (a *App) mountAdmin() {
	token := os.Getenv("IDEM_ADMIN_TOKEN")
	if token == "" {
		return
	}
	store, ok := a.Engine.Config().Store.(core.Admin)
	if !ok {
		a.Logger.Warn("admin: the store has no admin operations; " + AdminPath + " not served")
		return
	}
	a.Ops.Handle(AdminPath, admin.Handler(store, admin.BearerToken(token), admin.WithSealer(a.Engine.Config().Sealer)))
	a.Logger.Info("admin: " + AdminPath + " behind the bearer token of IDEM_ADMIN_TOKEN")
}
