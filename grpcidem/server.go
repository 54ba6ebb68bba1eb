package grpcidem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/idem-go/idem/core"
)

// Reserved names in a stored record's Header, beside the header metadata:
// no metadata key holds a colon.
const (
	recordMessage = ":message"  // the full name of an OK reply's message type
	recordTrailer = ":trailer:" // prefix of the trailer metadata
)

// Metadata of a replay, beside ReplayMetadata.
const (
	originalTimestampMetadata = "x-original-timestamp"
	bodyOmittedMetadata       = "x-idempotency-body-omitted"
)

var (
	errPanicked  = errors.New("grpcidem: the handler panicked")
	errNotProto  = errors.New("grpcidem: the reply is not a proto.Message")
	errWrongType = errors.New("grpcidem: the reply is not of the method's output type")
)

// server is one UnaryServerInterceptor.
type server struct {
	eng  *core.Engine
	cfg  core.Config
	opts *options
	// Lower-case metadata names of cfg.KeyHeader and cfg.LegacyKeyHeader
	// ("" for none).
	keyName, legacyName string
	names               *strings.Replacer // the header names in core's key errors to the metadata names
	// The refusals, built once: status errors are immutable.
	inFlight, reused, unavailable, uncommitted error
}

// transport names gRPC in the Engine's events, whose Code is a gRPC code.
const transport = "grpc"

// UnaryServerInterceptor returns the interceptor that makes the unary
// calls carrying a key (or every covered call, with core.Config.Required)
// run at most once per key on eng. It panics if eng is nil, when the
// server is set up.
func UnaryServerInterceptor(eng *core.Engine, opts ...Option) grpc.UnaryServerInterceptor {
	if eng == nil {
		panic("grpcidem: UnaryServerInterceptor needs an Engine")
	}
	s := &server{eng: eng, cfg: eng.Config(), opts: newOptions(opts)}
	s.keyName = strings.ToLower(s.cfg.KeyHeader)
	names := []string{s.cfg.KeyHeader, s.keyName}
	if s.cfg.LegacyKeyHeader != "-" {
		s.legacyName = strings.ToLower(s.cfg.LegacyKeyHeader)
		names = append(names, s.cfg.LegacyKeyHeader, s.legacyName)
		// A Replacer tries its pairs in argument order: the longer name
		// first, or a key header that starts the legacy one ("Key",
		// "Key-Legacy") would lower-case only its own part of the other.
		if len(s.cfg.LegacyKeyHeader) > len(s.cfg.KeyHeader) {
			names[0], names[1], names[2], names[3] = names[2], names[3], names[0], names[1]
		}
	}
	s.names = strings.NewReplacer(names...)
	retry := &errdetails.RetryInfo{RetryDelay: durationpb.New(s.cfg.RetryAfter)}
	s.inFlight = refusal(codes.Aborted, ReasonKeyInFlight,
		"a call with this idempotency key is in flight; retry later", retry)
	s.reused = refusal(codes.AlreadyExists, ReasonKeyReused,
		"this idempotency key was already used with a different request")
	s.unavailable = refusal(codes.Unavailable, ReasonStoreUnavailable,
		"the call was not run because its idempotency cannot be guaranteed; retry later", retry)
	s.uncommitted = refusal(codes.Unavailable, ReasonStoreUnavailable,
		"the call's writes and its result could not be committed, so none was kept; retry later", retry)
	return s.intercept
}

// refusal is a status error with an ErrorInfo of reason and more details.
func refusal(code codes.Code, reason, msg string, more ...protoadapt.MessageV1) error {
	details := append([]protoadapt.MessageV1{&errdetails.ErrorInfo{Reason: reason, Domain: ErrorDomain}}, more...)
	st, err := status.New(code, msg).WithDetails(details...)
	if err != nil { // a detail failed to marshal: not with these types
		return status.Error(code, msg)
	}
	return st.Err()
}

func (s *server) intercept(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	if !s.keyed(ctx) || s.opts.skip != nil && s.opts.skip(ctx, info.FullMethod) {
		return handler(ctx, req)
	}
	start := time.Now()
	md := &incoming{ctx: ctx, s: s}
	key, present, err := s.eng.Key(md)
	switch {
	case err != nil:
		detail := strings.TrimPrefix(err.Error(), core.ErrInvalidKey.Error()+": ")
		if _, wrapsTwo := err.(interface{ Unwrap() []error }); !wrapsTwo {
			// Core's own message, which names the headers; a malformed key's
			// or Config.ValidateKey's (ErrInvalidKey and that error) names
			// none, and the app's text is not rewritten.
			detail = s.names.Replace(detail)
		}
		return nil, s.invalidKey(ctx, info, start, key, err, ReasonInvalidKey, "invalid idempotency key: "+detail)
	case !present:
		return nil, s.invalidKey(ctx, info, start, key, nil, ReasonMissingKey,
			"this call requires an "+s.keyName+" metadata entry")
	}
	msg, ok := req.(proto.Message)
	if !ok {
		return nil, status.Errorf(codes.Internal, "grpcidem: the request of %s is a %T, not a proto.Message", info.FullMethod, req)
	}
	answer := &stored{method: info.FullMethod}
	c := core.Call{Context: ctx, Key: key, Method: info.FullMethod, Route: info.FullMethod, Transport: transport,
		InFlight: int(codes.Aborted), Reused: int(codes.AlreadyExists), Unavailable: int(codes.Unavailable),
		OverQuota: int(codes.ResourceExhausted), Omitted: int(codes.FailedPrecondition), Check: answer.check}
	if c.Fingerprint, err = fingerprint(info.FullMethod, msg); err != nil {
		return nil, status.Errorf(codes.Internal, "grpcidem: fingerprint of %s: %v", info.FullMethod, err)
	}
	if s.cfg.Scope != nil || s.cfg.TTL != nil {
		r := &core.Request{Context: ctx, Method: info.FullMethod, Route: info.FullMethod, Header: md}
		if s.cfg.Scope != nil {
			c.Scope = s.cfg.Scope(r)
		}
		if s.cfg.TTL != nil {
			c.TTL = s.cfg.TTL(r)
		}
	}
	l, rec, err := s.eng.Acquire(&c)
	switch {
	case l != nil:
		return s.run(ctx, req, handler, l, info.FullMethod)
	case rec != nil:
		return s.replay(ctx, rec, answer)
	case errors.Is(err, core.ErrKeyReused):
		return nil, s.reused
	case errors.Is(err, core.ErrInFlight):
		return nil, s.inFlight
	case errors.Is(err, core.ErrQuotaExceeded):
		return nil, s.overQuota(err)
	default:
		return nil, s.unavailable
	}
}

// overQuota is the refusal of a key over core.Config.Quota: its RetryInfo
// says when the scope's window has room, or is Config.RetryAfter.
func (s *server) overQuota(err error) error {
	d := s.cfg.RetryAfter
	var qe *core.QuotaError
	if errors.As(err, &qe) && qe.RetryAfter > 0 {
		d = qe.RetryAfter
	}
	return refusal(codes.ResourceExhausted, ReasonQuotaExceeded,
		"too many calls with idempotency keys in this scope; retry later", &errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
}

// keyed reports whether the call carries a key entry or keys are required:
// the others pass at the cost of two map look-ups.
func (s *server) keyed(ctx context.Context) bool {
	return s.cfg.Required || metadata.ValueFromIncomingContext(ctx, s.keyName) != nil ||
		s.legacyName != "" && metadata.ValueFromIncomingContext(ctx, s.legacyName) != nil
}

func (s *server) invalidKey(ctx context.Context, info *grpc.UnaryServerInfo, start time.Time, key string, err error, reason, msg string) error {
	s.eng.Observe(core.Event{Context: ctx, Outcome: core.OutcomeInvalidKey, Transport: transport, Code: int(codes.InvalidArgument),
		Key: key, Method: info.FullMethod, Route: info.FullMethod, Duration: time.Since(start), Err: err})
	return refusal(codes.InvalidArgument, reason, msg)
}

// incoming is the core.HeaderGetter of the incoming metadata: names are
// matched lower-case.
type incoming struct {
	ctx context.Context
	s   *server
}

func (m *incoming) Values(name string) []string {
	switch name {
	case m.s.cfg.KeyHeader:
		name = m.s.keyName
	case m.s.cfg.LegacyKeyHeader:
		name = m.s.legacyName
	default:
		name = strings.ToLower(name)
	}
	return metadata.ValueFromIncomingContext(m.ctx, name)
}

func (m *incoming) Get(name string) string {
	if v := m.Values(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

var fingerprintBuf = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// fingerprint is the SHA-256 of the full method, a NUL and the
// deterministic encoding of the request less its unknown fields: the
// handler never sees them, and their bytes are kept as sent, so a newer
// client's map field (which Go encodes in random order) would make each
// retry another request.
func fingerprint(method string, m proto.Message) ([32]byte, error) {
	if unknown(m.ProtoReflect(), false) {
		m = proto.Clone(m)
		unknown(m.ProtoReflect(), true)
	}
	bp := fingerprintBuf.Get().(*[]byte)
	b := append(append((*bp)[:0], method...), 0)
	b, err := proto.MarshalOptions{Deterministic: true}.MarshalAppend(b, m)
	sum := sha256.Sum256(b)
	if cap(b) <= 64<<10 {
		*bp = b[:0]
		fingerprintBuf.Put(bp)
	}
	return sum, err
}

// unknown reports whether m, or a message inside it, holds unknown
// fields; if discard, it drops them all.
func unknown(m protoreflect.Message, discard bool) bool {
	found := len(m.GetUnknown()) > 0
	if found && discard {
		m.SetUnknown(nil)
	}
	in := func(v protoreflect.Value) bool {
		found = unknown(v.Message(), discard) || found
		return discard || !found
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, e protoreflect.Value) bool { return in(e) })
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i, l := 0, v.List(); i < l.Len(); i++ {
					if !in(l.Get(i)) {
						break
					}
				}
			}
		case fd.Message() != nil:
			in(v)
		}
		return discard || !found
	})
	return found
}

// run runs the handler under the lease and stores its reply if the policy
// accepts it. A panic releases the key and goes on up.
//
// With a TxStore (l.Buffered), the handler's context carries the
// transaction, its metadata is held until its result has committed with
// its writes, and a failed commit answers Unavailable instead.
func (s *server) run(ctx context.Context, req any, handler grpc.UnaryHandler, l *core.Lease, method string) (any, error) {
	if !l.Protected() { // fail-open: the store failed
		return handler(ctx, req)
	}
	defer l.Release(int(codes.Unknown), errPanicked) // a no-op once the lease ended
	ctx = l.NewContext(ctx)                          // core.InfoFromContext, a TxStore's transaction
	c := &capture{held: l.Buffered(), ctx: ctx}
	if st := grpc.ServerTransportStreamFromContext(ctx); st != nil {
		c.ServerTransportStream = st
		ctx = grpc.NewContextWithServerTransportStream(ctx, c)
	}
	resp, err := handler(ctx, req)
	if !s.store(l, c, method, resp, err) {
		return nil, s.uncommitted
	}
	c.send() // the held metadata
	return resp, err
}

// store ends the lease with the handler's result: stored if the policy
// accepts it, else released. It returns false if the result must not be
// sent: a TxStore's commit failed, or an OK reply could not be stored
// (not a message of the method's type), which rolled the handler's writes
// back.
func (s *server) store(l *core.Lease, c *capture, method string, resp any, err error) bool {
	st, ok := status.FromError(err)
	if !ok {
		st = status.FromContextError(err) // as the server answers it
	}
	code := st.Code()
	if !s.opts.storable(code) {
		l.Release(int(code), nil)
		return true
	}
	rec := &core.Record{Code: int(code), Header: c.record()}
	var merr error
	if code == codes.OK {
		// A nil *Reply is a message: gRPC sends it empty, and so will a replay.
		m, ok := resp.(proto.Message)
		if !ok || m == nil {
			l.Release(int(code), errNotProto)
			return !l.Buffered()
		}
		if want := outputType(method); want != "" && m.ProtoReflect().Descriptor().FullName() != want {
			l.Release(int(code), fmt.Errorf("%w: %s, the method answers %s", errWrongType, m.ProtoReflect().Descriptor().FullName(), want))
			return !l.Buffered()
		}
		rec.Header[recordMessage] = []string{string(m.ProtoReflect().Descriptor().FullName())}
		rec.Body, merr = proto.Marshal(m)
	} else {
		rec.Body, merr = proto.Marshal(st.Proto())
	}
	if merr != nil {
		l.Release(int(code), merr)
		return !l.Buffered()
	}
	return l.Complete(rec) == nil // the Engine's storage policy applies: headers kept, denied, body bound
}

// capture is the handler's ServerTransportStream: it passes the metadata
// the handler sets on and keeps a copy to store. If held, the metadata is
// passed on only by send, once the result has committed.
type capture struct {
	grpc.ServerTransportStream
	ctx             context.Context // the call's: done once its client went away
	held            bool
	mu              sync.Mutex
	header, trailer metadata.MD
}

func (c *capture) SetHeader(md metadata.MD) error {
	if c.held {
		return c.keep(&c.header, md, nil)
	}
	return c.keep(&c.header, md, c.ServerTransportStream.SetHeader(md))
}

// SendHeader sends the header metadata, or, if held, keeps it to go out
// with the reply.
func (c *capture) SendHeader(md metadata.MD) error {
	if c.held {
		return c.keep(&c.header, md, nil)
	}
	return c.keep(&c.header, md, c.ServerTransportStream.SendHeader(md))
}

func (c *capture) SetTrailer(md metadata.MD) error {
	if c.held {
		return c.keep(&c.trailer, md, nil)
	}
	return c.keep(&c.trailer, md, c.ServerTransportStream.SetTrailer(md))
}

// send passes the held metadata on, to go out with the reply.
func (c *capture) send() {
	if !c.held || c.ServerTransportStream == nil {
		return
	}
	c.held = false
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.header) > 0 {
		c.ServerTransportStream.SetHeader(c.header) //nolint:errcheck // the call is over: nothing to tell
	}
	if len(c.trailer) > 0 {
		c.ServerTransportStream.SetTrailer(c.trailer) //nolint:errcheck // as above
	}
}

// keep keeps md to store, if the stream took it (err is nil) or would have
// but for the client, which went away (the call's context is done, and
// gRPC refuses metadata on a stream it closed): the reply is stored all
// the same, and the retry that replays it must get its metadata too.
func (c *capture) keep(into *metadata.MD, md metadata.MD, err error) error {
	if err == nil || c.ctx.Err() != nil {
		c.mu.Lock()
		*into = metadata.Join(*into, md)
		c.mu.Unlock()
	}
	return err
}

// record returns the metadata to store, less gRPC's reserved names; the
// Engine's storage policy drops the denied ones.
func (c *capture) record() map[string][]string {
	c.mu.Lock()
	defer c.mu.Unlock()
	h := make(map[string][]string, len(c.header)+len(c.trailer)+1)
	add := func(prefix string, md metadata.MD) {
		for k, v := range md {
			k = strings.ToLower(k)
			if !strings.HasPrefix(k, "grpc-") && k != ReplayMetadata {
				h[prefix+k] = v
			}
		}
	}
	add("", c.header)
	add(recordTrailer, c.trailer)
	return h
}

// stored is a call's stored answer, decoded by check before the Engine
// replays it.
type stored struct {
	method string
	reply  any   // the stored reply, or
	err    error // the stored status, or the refusal of an omitted reply
}

// check decodes rec for the Engine (core.Call.Check): a record that cannot
// be the method's answer (a reply of another type than its output, of a
// type not registered, that does not decode, or a code that is not gRPC's)
// is an error, and the Engine reports it as a corrupt record.
func (d *stored) check(rec *core.Record) error {
	code := codes.Code(rec.Code)
	var message string
	if v := rec.Header[recordMessage]; len(v) > 0 {
		message = v[0]
	}
	switch {
	case code > codes.Unauthenticated:
		return fmt.Errorf("code %d is not gRPC's", rec.Code)
	case rec.BodyOmitted:
		d.err = refusal(codes.FailedPrecondition, ReasonReplyOmitted, fmt.Sprintf(
			"the call with this idempotency key completed with code %s, but its reply (%d bytes) was too large to store",
			code, rec.BodySize))
		return nil
	case code != codes.OK:
		p := &spb.Status{}
		if err := proto.Unmarshal(rec.Body, p); err != nil || p.Code != int32(code) {
			return fmt.Errorf("stored status of code %s cannot be decoded", code)
		}
		d.err = status.ErrorProto(p)
		return nil
	}
	if want := outputType(d.method); want != "" && protoreflect.FullName(message) != want {
		return fmt.Errorf("stored reply of type %q, the method answers %s", message, want)
	}
	mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName(message))
	if err != nil {
		return fmt.Errorf("stored reply of type %q: %w", message, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(rec.Body, m); err != nil {
		return fmt.Errorf("stored reply of type %q: %w", message, err)
	}
	d.reply = m
	return nil
}

// replay answers with a stored record that check decoded into d: its
// metadata, marked, and its reply or error.
func (s *server) replay(ctx context.Context, rec *core.Record, d *stored) (any, error) {
	header := metadata.MD{ReplayMetadata: {"true"}}
	var trailer metadata.MD
	for k, v := range rec.Header {
		switch {
		case k == recordMessage:
		case strings.HasPrefix(k, recordTrailer):
			if trailer == nil {
				trailer = metadata.MD{}
			}
			trailer[k[len(recordTrailer):]] = v
		default:
			header[k] = v
		}
	}
	if s.cfg.ReplayTimestamp {
		header[originalTimestampMetadata] = []string{rec.RequestedAt.UTC().Format(time.RFC3339)}
	}
	if rec.BodyOmitted {
		header[bodyOmittedMetadata] = []string{"sha256=" + hex.EncodeToString(rec.BodySHA256[:]) +
			"; size=" + strconv.FormatInt(rec.BodySize, 10)}
	}
	// Errors outside a server (no stream): nothing to send them on; or, on a
	// stream, when an interceptor chained before grpcidem sent the header
	// already (grpc.SendHeader): the replay's metadata, its mark included,
	// then goes out in the trailer rather than not at all.
	if err := grpc.SetHeader(ctx, header); err != nil {
		trailer = metadata.Join(header, trailer)
	}
	if len(trailer) > 0 {
		_ = grpc.SetTrailer(ctx, trailer)
	}
	return d.reply, d.err
}

// outputType returns the full name of the output message of a method
// ("/pkg.Service/Method"), or "" if its service is not in
// protoregistry.GlobalFiles (generated code registers it).
func outputType(method string) protoreflect.FullName {
	svc, name, ok := strings.Cut(strings.TrimPrefix(method, "/"), "/")
	if !ok {
		return ""
	}
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(svc))
	if err != nil {
		return ""
	}
	sd, ok := d.(protoreflect.ServiceDescriptor)
	if !ok {
		return ""
	}
	if md := sd.Methods().ByName(protoreflect.Name(name)); md != nil {
		return md.Output().FullName()
	}
	return ""
}
