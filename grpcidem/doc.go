// Package grpcidem is idem's gRPC transport: a unary server interceptor that
// runs a call carrying an idempotency key (KeyMetadata) at most once and
// replays its reply, with ReplayMetadata "true", to every retry; and a unary
// client interceptor that sends a key and retries with it.
//
// Build one core.Engine and chain UnaryServerInterceptor(eng) once, after
// a recovery interceptor (chained twice, every call meets its own key in
// flight: Aborted, and the handler does not run). Every unary method is covered (WithSkip leaves some
// out); streaming calls are not. A reply, or an error's status, is stored
// when WithStorable accepts its code (DefaultStorable: OK and client
// errors), with the metadata the handler set less what core.Config's
// storage policy drops; otherwise, and after a panic, the key is released.
// The interceptor's own errors carry an errdetails.ErrorInfo (ErrorDomain,
// a Reason constant): a key in flight is Aborted with RetryInfo, a reused
// key AlreadyExists, a bad key InvalidArgument. On pgstore's transactional
// mode the handler writes through pgstore.Tx(ctx), and a reply whose
// commit failed is not sent: the call answers Unavailable.
//
// UnaryClientInterceptor adds a key to every covered call that has none and
// retries Unavailable, Aborted and a ResourceExhausted whose RetryInfo is
// within its MaxDelay with it; Replayed tells a replay from its header
// metadata.
//
// See Example; every case is in [docs/contract.md], "gRPC", and the reasons
// in [docs/design.md], "grpcidem".
//
// [docs/contract.md]: https://github.com/idem-go/idem/blob/main/docs/contract.md
// [docs/design.md]: https://github.com/idem-go/idem/blob/main/docs/design.md
package grpcidem
