package redislock

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// redialInterval is how often a dial refused by a down Redis is tried again
// within its deadline.
const redialInterval = 10 * time.Millisecond

// redial wraps dial so that a connection refused (Redis restarting) is
// dialled again every redialInterval until ctx ends, instead of failing at
// once: go-redis counts failed dials, and past PoolSize of them answers
// every command with the last dial error until its own probe, once a
// second, gets through. With redial a dial succeeds within redialInterval
// of Redis accepting connections again (docs/design.md, "Outages").
func redial(dial func(ctx context.Context, network, addr string) (net.Conn, error)) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		for {
			conn, err := dial(ctx, network, addr)
			if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
				return conn, err
			}
			t := time.NewTimer(redialInterval)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
		}
	}
}

// setRedial gives a client's dials the redial loop; go-redis's own retries
// of a failed dial (five, 100 ms apart) are then left out. Its dial timeout
// gets go-redis's default if it has none.
func setRedial(dialer *func(context.Context, string, string) (net.Conn, error), retries *int, timeout *time.Duration, tlsConfig *tls.Config) {
	if *timeout == 0 {
		*timeout = defaultDialTimeout
	}
	d := *dialer
	if d == nil {
		d = redis.NewDialer(&redis.Options{DialTimeout: *timeout, TLSConfig: tlsConfig})
	}
	*dialer = redial(d)
	if *retries == 0 {
		*retries = 1
	}
}
