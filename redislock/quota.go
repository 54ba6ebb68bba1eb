package redislock

import (
	"context"
	_ "embed"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/core"
)

var (
	//go:embed quota_admit.lua
	quotaAdmitLua    string
	quotaAdmitScript = redis.NewScript(quotaAdmitLua)

	//go:embed quota_refresh.lua
	quotaRefreshLua    string
	quotaRefreshScript = redis.NewScript(quotaRefreshLua)

	//go:embed quota_leave.lua
	quotaLeaveLua    string
	quotaLeaveScript = redis.NewScript(quotaLeaveLua)
)

// EnforcesQuota reports that the Store enforces core.Config.Quota: a new
// key's lock is admitted in the scope's keys, "<prefix>-quota:{<scope>}"
// (the admitted locks) and "<prefix>-rate:{<scope>}" (the admissions of
// the window), by one script after the acquire script.
func (s *Store) EnforcesQuota() bool { return true }

// tokenScope separates a lock token from the quota scope it counts in.
const tokenScope = "~"

// quotaKeys returns the Redis keys of a quota scope.
func (s *Store) quotaKeys(scope string) (locks, rate string) {
	return s.quotaPrefix + scope + "}", s.ratePrefix + scope + "}"
}

// scopeOf returns the quota scope a token's lock counts in, or "".
func scopeOf(token string) string {
	_, scope, _ := strings.Cut(token, tokenScope)
	return scope
}

// quotaReleaseTimeout bounds the release of a lock whose admission failed.
const quotaReleaseTimeout = time.Second

// admit admits the lock of token, just taken for key, in its scope under
// q; if the quota refuses it, or the admission fails, the lock is released.
func (s *Store) admit(ctx context.Context, lock, scope, token string, q core.Quota, lockTTL time.Duration) error {
	locks, rate := s.quotaKeys(scope)
	cmd, runs := s.run(ctx, quotaAdmitScript, []string{locks, rate}, token, millis(lockTTL), q.InFlight, q.PerWindow, millis(q.Window))
	res, err := cmd.Int64Slice()
	switch {
	case err != nil:
		err = storeError("quota", runs, err)
	case len(res) == 0:
		err = fmt.Errorf("%w to quota: %v", ErrUnexpectedReply, res)
	case res[0] == 1:
		return nil
	case len(res) == 2:
		err = &core.QuotaError{RetryAfter: time.Duration(res[1]) * time.Millisecond}
	default:
		err = fmt.Errorf("%w to quota: %v", ErrUnexpectedReply, res)
	}
	// Released even if the admission took ctx's time, else the lock holds
	// the key for its initial lease; bounded, as Redis may be failing.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), quotaReleaseTimeout)
	defer cancel()
	s.run(rctx, releaseScript, []string{lock}, token) //nolint:errcheck // else it expires
	return err
}

// quotaRefresh moves the expiry of token's admitted lock with the lock's.
func (s *Store) quotaRefresh(ctx context.Context, token string, lockTTL time.Duration) {
	if scope := scopeOf(token); scope != "" {
		locks, _ := s.quotaKeys(scope)
		s.run(ctx, quotaRefreshScript, []string{locks}, token, millis(lockTTL)) //nolint:errcheck // it expires with its first TTL
	}
}

// quotaLeave ends the count of token's lock in its scope.
func (s *Store) quotaLeave(ctx context.Context, token string) {
	if scope := scopeOf(token); scope != "" {
		locks, _ := s.quotaKeys(scope)
		s.run(ctx, quotaLeaveScript, []string{locks}, token) //nolint:errcheck // it expires with the lock
	}
}
