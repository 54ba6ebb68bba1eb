// Package grpcidem is the gRPC transport of idem: a unary server
// interceptor that runs a call carrying an idempotency key at most once
// and replays its reply to every retry, and a unary client interceptor that
// sends a key and retries with it.
//
//	eng, err := core.New(core.Config{Store: redislock.New(rdb, nil)})
//	...
//	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(
//		recovery.UnaryServerInterceptor(), // go-grpc-middleware's, outside: a panic releases the key
//		grpcidem.UnaryServerInterceptor(eng),
//	))
//	conn, err := grpc.NewClient(target, grpc.WithUnaryInterceptor(grpcidem.UnaryClientInterceptor()))
//
// # Server
//
// Every unary method is covered (WithSkip leaves some out: with
// core.Config.Required, health checks need a key otherwise); core.Config's
// Methods, MaxBodyBytes and CriticalHeaders are HTTP's and not used (the
// server's grpc.MaxRecvMsgSize bounds a request). The key
// is the metadata entry KeyMetadata (or LegacyKeyMetadata), read and
// validated by core.Engine.Key. The fingerprint is the SHA-256 of the full
// method and the deterministic encoding of the request message. For
// core.Config.Scope and TTL, the core.Request holds only Context, Method and
// Route (both the full method, "/pkg.Service/Method") and Header (the
// incoming metadata, names matched lower-case: Get("X-User-ID") reads
// x-user-id).
//
// The handler's reply, or its error's status (code, message, details), is
// stored when WithStorable's policy accepts its code (DefaultStorable: OK
// and client errors), with the header and trailer metadata the handler set
// (grpc.SetHeader, SendHeader, SetTrailer; but core.Config.DeniedHeaders,
// lower-cased, and grpc-*). Otherwise, and after a panic, the key is
// released so that a retry runs the handler again; put a recovery
// interceptor outside this one. A replay answers with the stored metadata,
// ReplayMetadata "true", and the reply decoded into its message type (found
// by name in protoregistry.GlobalTypes, where generated code registers it;
// Internal if it is not there) or the stored status. A reply encoded larger than
// core.Config.MaxStoredBodyBytes is not kept: its replay is
// FailedPrecondition (ReasonReplyOmitted), not a second run.
//
// The interceptor's own errors carry an errdetails.ErrorInfo (ErrorDomain,
// a Reason constant):
//
//	missing key (core.Config.Required), invalid key   InvalidArgument
//	key in flight                                     Aborted, with RetryInfo
//	same key, another request (method or message)     AlreadyExists
//	store down, core.Config.FailClosed                Unavailable, with RetryInfo
//
// Aborted, not Unavailable, for a key in flight: the call conflicts with
// another one, the server is up; clients retry both, and metrics tell them
// apart. AlreadyExists for a reused key: the key exists, bound to another
// request; InvalidArgument stays for what is wrong whatever the state.
//
// Streaming calls are not covered: there is no stream interceptor, and the
// unary one never sees them.
//
// # Client
//
// UnaryClientInterceptor adds a key to every covered call that has none and
// retries Unavailable and Aborted with that same key (see its doc).
// Replayed tells a replayed reply from its header metadata.
package grpcidem
