// Package envoyrls serves Envoy's rate-limit service API
// (envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit) over
// gRPC, so that a team running Envoy's ratelimit filter can point it at
// Tollgate instead of Lyft's ratelimit service with a change of
// configuration. Each descriptor Envoy sends is one Tollgate check
// (enforce.Checker.Check): its entries name the caller (an API key, or a
// client address for anonymous callers) and the resource; the plans,
// rules and limiter state are Tollgate's own.
package envoyrls

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/checkapi"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/httpx"
)

// Config maps descriptor entries to a check. Entry keys are those of
// Envoy's rate-limit actions: remote_address, generic_key, header_match,
// or the descriptor_key of a request_headers action.
type Config struct {
	// KeyEntry's value is the caller's API key, or an Authorization
	// header's value read as forward-auth reads it: "Bearer <key>" (the
	// scheme in any case) is the key, another scheme is no key (the
	// caller is anonymous). Default "api_key".
	KeyEntry string
	// IPEntry's value is the client's address; callers without a key are
	// anonymous and limited per address. Default "remote_address".
	IPEntry string
	// ResourceEntries' values name the resource (e.g. "POST /v1/search"),
	// the first present wins, normalised as /v1/check normalises its
	// resource (checkapi.NormalizeResource). Without any, entries "method"
	// and "path" (request_headers actions on :method and :path) give
	// "METHOD /path" as forward-auth does (checkapi.Resource: HEAD counts
	// as GET, the path decoded and cleaned, no query), and without those
	// the resource is "*".
	// Default: resource, header_match, generic_key.
	ResourceEntries []string
	// TrustedProxies: in an IPEntry value holding an X-Forwarded-For list,
	// the rightmost address not in these networks is the client.
	TrustedProxies httpx.TrustedProxies
	// Refusals counts and logs the calls refused for Envoy's own service
	// token (nil: not counted), with forward-auth's.
	Refusals *checkapi.GatewayRefusals
}

// MetadataServiceToken is the gRPC metadata key carrying Envoy's service
// token (set with initial_metadata on the rate-limit service's
// grpc_service); "authorization: Bearer <token>" works too.
const MetadataServiceToken = "x-tollgate-service-token"

// NewServer returns a gRPC server with the rate-limit service and the
// standard health service (for Envoy's gRPC health checks). Every
// ShouldRateLimit call must carry a valid service token; health checks
// need none.
func NewServer(checker *enforce.Checker, tokens *enforce.TokenVerifier, cfg Config, log *slog.Logger) *grpc.Server {
	if cfg.KeyEntry == "" {
		cfg.KeyEntry = "api_key"
	}
	if cfg.IPEntry == "" {
		cfg.IPEntry = "remote_address"
	}
	if cfg.ResourceEntries == nil {
		cfg.ResourceEntries = []string{"resource", "header_match", "generic_key"}
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(requireToken(tokens, cfg.Refusals)),
		grpc.MaxRecvMsgSize(1<<20),
	)
	rlsv3.RegisterRateLimitServiceServer(srv, &Service{checker: checker, cfg: cfg, log: log})
	healthpb.RegisterHealthServer(srv, health.NewServer())
	return srv
}

// requireToken refuses rate-limit calls without a valid service token
// (codes.Unauthenticated: Envoy then applies its failure_mode_deny), and
// counts each refusal in refusals. The token is MetadataServiceToken's
// value, or authorization's: "Bearer <token>" (the scheme in any case),
// or the bare token, as forward-auth reads HeaderServiceToken.
func requireToken(tokens *enforce.TokenVerifier, refusals *checkapi.GatewayRefusals) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !strings.HasPrefix(info.FullMethod, "/envoy.service.ratelimit.") {
			return handler(ctx, req)
		}
		md, _ := metadata.FromIncomingContext(ctx)
		token := strings.TrimSpace(first(md.Get(MetadataServiceToken)))
		if token == "" {
			a := strings.TrimSpace(first(md.Get("authorization")))
			if t, ok := checkapi.BearerCredentials(a); ok {
				token = t
			} else if !strings.Contains(a, " ") {
				token = a
			}
		}
		refused := func(msg string) error {
			var addr string
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				addr = p.Addr.String()
			}
			refusals.Refused(ctx, "envoy-ratelimit", token != "", addr, time.Now())
			return status.Error(codes.Unauthenticated, msg)
		}
		if token == "" {
			return nil, refused("a service token is required in " + MetadataServiceToken)
		}
		if _, err := tokens.Verify(token, time.Now()); err != nil {
			return nil, refused("invalid service token")
		}
		return handler(ctx, req)
	}
}

func first(v []string) string {
	if len(v) == 0 {
		return ""
	}
	return v[0]
}

// Service implements RateLimitService on a Checker.
type Service struct {
	rlsv3.UnimplementedRateLimitServiceServer
	checker *enforce.Checker
	cfg     Config
	log     *slog.Logger
}

// maxDescriptors bounds one call's checks.
const maxDescriptors = 16

// ShouldRateLimit decides every descriptor as one check and answers
// OVER_LIMIT when any is denied, as Envoy expects: Envoy then replies 429
// (adding x-envoy-ratelimited itself). A denial for the key (invalid,
// revoked, expired, suspended tenant) or by a fail-closed rule while
// Redis is down is OVER_LIMIT too, with x-tollgate-reason saying which.
// The governing check's rate-limit headers (checkapi.SetHeaders, the
// same as /v1/check's) go in response_headers_to_add, and on OK the
// caller's tenant, key and plan in request_headers_to_add for the
// upstream. A descriptor naming neither a key nor an address is not
// Tollgate's: it is OK and limits nothing.
//
// Errors: Unavailable before the first snapshot has loaded,
// InvalidArgument for a call without descriptors or with too many; Envoy's
// failure_mode_deny decides what those mean for the request.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	started := time.Now()
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "no descriptors")
	}
	if len(req.GetDescriptors()) > maxDescriptors {
		return nil, status.Errorf(codes.InvalidArgument, "%d descriptors: at most %d", len(req.GetDescriptors()), maxDescriptors)
	}
	cost := int64(req.GetHitsAddend())
	if cost == 0 {
		cost = 1 // Envoy: "if not set, a request increases the matched limit by 1"
	}
	resp := &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}
	var governing *enforce.Decision
	for _, desc := range req.GetDescriptors() {
		check, ok := s.request(desc, cost)
		if !ok {
			resp.Statuses = append(resp.Statuses, &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK})
			continue
		}
		d, err := s.checker.Check(ctx, check)
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil, status.FromContextError(ctx.Err()).Err()
			case errors.Is(err, enforce.ErrNotReady):
				return nil, status.Error(codes.Unavailable, "not ready: the snapshot of plans and keys has not loaded yet")
			case tollgate.ErrorCode(err) == tollgate.EINVALID:
				return nil, status.Error(codes.InvalidArgument, tollgate.ErrorMessage(err)+": "+fieldsOf(err))
			}
			s.log.ErrorContext(ctx, "envoy rate-limit check failed", "err", err)
			return nil, status.Error(codes.Internal, "internal error")
		}
		resp.Statuses = append(resp.Statuses, descriptorStatus(&d))
		if !d.Allowed {
			resp.OverallCode = rlsv3.RateLimitResponse_OVER_LIMIT
		}
		if governs(&d, governing) {
			governing = &d
		}
	}
	if governing != nil {
		s.answer(resp, governing)
	}
	s.checker.Observe(time.Since(started))
	return resp, nil
}

// governs reports whether d should describe the answer rather than cur:
// a denial over an allowance, then the longest retry among denials, the
// least remaining among allowances.
func governs(d, cur *enforce.Decision) bool {
	if cur == nil {
		return true
	}
	if d.Allowed != cur.Allowed {
		return !d.Allowed
	}
	if !d.Allowed {
		return d.RetryAfterMS < 0 && cur.RetryAfterMS >= 0 || cur.RetryAfterMS >= 0 && d.RetryAfterMS > cur.RetryAfterMS
	}
	g, ok := d.Governing()
	if !ok {
		return false
	}
	cg, ok := cur.Governing()
	return !ok || g.Remaining < cg.Remaining
}

// answer adds the headers of d, the governing decision, to resp.
func (s *Service) answer(resp *rlsv3.RateLimitResponse, d *enforce.Decision) {
	h := http.Header{}
	checkapi.SetHeaders(h, d)
	h.Set(checkapi.HeaderReason, d.Reason)
	if d.Degraded {
		h.Set(checkapi.HeaderDegraded, "true")
	}
	resp.ResponseHeadersToAdd = headerValues(h)
	if d.Allowed {
		// All three, empty for an anonymous caller, so that they replace
		// what a client may have sent under these names.
		resp.RequestHeadersToAdd = headerValues(http.Header{checkapi.HeaderTenant: {d.TenantID},
			checkapi.HeaderKeyID: {d.KeyID}, checkapi.HeaderPlan: {d.Plan}})
		return
	}
	body, _ := json.Marshal(httpx.Problem{Type: "about:blank", Title: http.StatusText(http.StatusTooManyRequests),
		Status: http.StatusTooManyRequests, Detail: d.Reason, Code: tollgate.ERATELIMITED})
	resp.RawBody = append(body, '\n')
}

// headerValues converts h to Envoy's header list, names in lower case
// (HTTP/2), sorted for a stable answer.
func headerValues(h http.Header) []*corev3.HeaderValue {
	names := make([]string, 0, len(h))
	for name := range h {
		names = append(names, name)
	}
	slices.Sort(names)
	out := make([]*corev3.HeaderValue, 0, len(names))
	for _, name := range names {
		out = append(out, &corev3.HeaderValue{Key: strings.ToLower(name), Value: strings.Join(h[name], ", ")})
	}
	return out
}

// descriptorStatus is one descriptor's part of the answer: its code and
// its governing rule as an Envoy limit.
func descriptorStatus(d *enforce.Decision) *rlsv3.RateLimitResponse_DescriptorStatus {
	st := &rlsv3.RateLimitResponse_DescriptorStatus{Code: rlsv3.RateLimitResponse_OK}
	if !d.Allowed {
		st.Code = rlsv3.RateLimitResponse_OVER_LIMIT
	}
	g, ok := d.Governing()
	if !ok {
		return st
	}
	st.LimitRemaining = clampUint32(g.Remaining)
	if g.ResetAfterMS >= 0 {
		st.DurationUntilReset = durationpb.New(time.Duration(g.ResetAfterMS) * time.Millisecond)
	}
	if g.Limit > 0 && g.WindowS > 0 {
		unit, multiplier := unitOf(g.WindowS)
		st.CurrentLimit = &rlsv3.RateLimitResponse_RateLimit{Name: g.Name, RequestsPerUnit: clampUint32(g.Limit), Unit: unit}
		if multiplier != 1 {
			st.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(clampUint32(multiplier))
		}
	}
	return st
}

// unitOf expresses a window in Envoy's largest whole unit.
func unitOf(windowS int64) (rlsv3.RateLimitResponse_RateLimit_Unit, int64) {
	switch {
	case windowS%86400 == 0:
		return rlsv3.RateLimitResponse_RateLimit_DAY, windowS / 86400
	case windowS%3600 == 0:
		return rlsv3.RateLimitResponse_RateLimit_HOUR, windowS / 3600
	case windowS%60 == 0:
		return rlsv3.RateLimitResponse_RateLimit_MINUTE, windowS / 60
	}
	return rlsv3.RateLimitResponse_RateLimit_SECOND, windowS
}

func clampUint32(n int64) uint32 {
	return uint32(min(max(n, 0), math.MaxUint32))
}

// request maps a descriptor to a check; false when it names neither a key
// nor a valid address, or asks to give units back (not supported: the
// limiter only consumes).
func (s *Service) request(desc *ratelimitv3.RateLimitDescriptor, cost int64) (enforce.Request, bool) {
	if desc.GetIsNegativeHits() {
		return enforce.Request{}, false
	}
	entries := map[string]string{}
	for _, e := range desc.GetEntries() {
		if _, seen := entries[e.GetKey()]; !seen {
			entries[e.GetKey()] = e.GetValue()
		}
	}
	r := enforce.Request{Resource: "*", Cost: cost}
	if n := desc.GetHitsAddend(); n != nil {
		r.Cost = int64(min(n.GetValue(), 1_000_000_000))
	}
	r.Key = entryKey(entries[s.cfg.KeyEntry])
	if v := entries[s.cfg.IPEntry]; v != "" {
		// remote_address is one address; a request_headers action on
		// x-forwarded-for gives the list.
		h := http.Header{"X-Forwarded-For": {v}}
		ip := s.cfg.TrustedProxies.ForwardedClient(netip.Addr{}, h)
		if ip.IsValid() {
			r.IP = ip.String()
		}
	}
	if r.Key == "" && r.IP == "" {
		return enforce.Request{}, false
	}
	for _, name := range s.cfg.ResourceEntries {
		if v := strings.TrimSpace(entries[name]); v != "" {
			r.Resource = checkapi.NormalizeResource(truncate(v, 1024))
			return r, true
		}
	}
	if m, p := strings.ToUpper(entries["method"]), entries["path"]; m != "" && p != "" {
		r.Resource = checkapi.Resource(m, p)
	}
	return r, true
}

// entryKey returns the API key a key entry's value carries: the value
// itself, or, for an Authorization header's value ("<scheme>
// <credentials>": an API key holds no space), what forward-auth takes from
// it, the credentials of the Bearer scheme in any case; another scheme
// ("Basic …") carries no key, and the caller is anonymous.
func entryKey(v string) string {
	v = strings.TrimSpace(v)
	if !strings.ContainsAny(v, " \t") && !strings.EqualFold(v, "Bearer") {
		return v
	}
	k, _ := checkapi.BearerCredentials(v)
	return k
}

// truncate cuts s to at most n bytes on a character boundary and drops
// control characters, which no resource may hold.
func truncate(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, ""))
	if len(s) <= n {
		return s
	}
	s = s[:n]
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

func fieldsOf(err error) string {
	var e *tollgate.Error
	if !errors.As(err, &e) {
		return ""
	}
	var parts []string
	for k, v := range e.Fields {
		parts = append(parts, k+" "+v)
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}
