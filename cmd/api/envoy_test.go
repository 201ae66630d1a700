package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/tollgate/tollgate/internal/testenv"
)

// envoyClient is a real gRPC client of the check server's Envoy
// rate-limit service, calling as Envoy does with the service token in
// its initial metadata.
type envoyClient struct {
	conn  *grpc.ClientConn
	rls   rlsv3.RateLimitServiceClient
	token string
}

func dialEnvoy(t *testing.T, addr, token string) *envoyClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	testenv.Must(t, err)
	t.Cleanup(func() { conn.Close() })
	return &envoyClient{conn: conn, rls: rlsv3.NewRateLimitServiceClient(conn), token: token}
}

func (c *envoyClient) call(t *testing.T, req *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-tollgate-service-token", c.token)
	}
	return c.rls.ShouldRateLimit(ctx, req)
}

func (c *envoyClient) must(t *testing.T, req *rlsv3.RateLimitRequest) *rlsv3.RateLimitResponse {
	t.Helper()
	resp, err := c.call(t, req)
	if err != nil {
		t.Fatalf("ShouldRateLimit: %v", err)
	}
	return resp
}

// descriptor builds one descriptor from key/value pairs.
func descriptor(kv ...string) *ratelimitv3.RateLimitDescriptor {
	d := &ratelimitv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &ratelimitv3.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func rlRequest(descs ...*ratelimitv3.RateLimitDescriptor) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: "edge", Descriptors: descs}
}

func headerMap(hs []*corev3.HeaderValue) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		if _, dup := m[h.Key]; dup {
			m[h.Key] += "," // a duplicate shows up in the comparison
		}
		m[h.Key] += h.Value
	}
	return m
}

// TestEnvoyRateLimitService drives the check server's gRPC
// envoy.service.ratelimit.v3.RateLimitService as Envoy's ratelimit filter
// would.
func TestEnvoyRateLimitService(t *testing.T) {
	f := newFixture(t)
	addrs := f.startAPIAddrs(t, map[string]string{"TOLLGATE_ENVOY_GRPC_ADDR": "127.0.0.1:0"})
	envoy := dialEnvoy(t, addrs[1], f.token)

	t.Run("calls need a service token", func(t *testing.T) {
		for name, token := range map[string]string{"none": "", "bad": "not-a-token"} {
			_, err := (&envoyClient{rls: envoy.rls, token: token}).call(t, rlRequest(descriptor("remote_address", "203.0.113.1")))
			if status.Code(err) != codes.Unauthenticated {
				t.Errorf("%s token: %v, want Unauthenticated", name, err)
			}
		}
		// Counted with forward-auth's refusals, for the alert.
		if n, err := testenv.ScrapeSum(strings.TrimPrefix(addrs[0], "http://"), "tollgate_gateway_token_refused_total"); err != nil || n != 2 {
			t.Errorf("tollgate_gateway_token_refused_total = %v (%v), want 2", n, err)
		}
		// In authorization: Bearer in any case, or the bare token.
		for _, v := range []string{"Bearer " + f.token, "bearer " + f.token, f.token} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", v)
			_, err := envoy.rls.ShouldRateLimit(ctx, rlRequest(descriptor("remote_address", "203.0.113.9")))
			cancel()
			if err != nil {
				t.Errorf("authorization %q…: %v, want served", v[:8], err)
			}
		}
	})

	t.Run("health", func(t *testing.T) {
		resp, err := healthpb.NewHealthClient(envoy.conn).Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health: %v %v, want SERVING", resp, err)
		}
	})

	t.Run("anonymous by remote_address: OVER_LIMIT after 60", func(t *testing.T) {
		req := rlRequest(descriptor("remote_address", "203.0.113.1", "generic_key", "GET /repos"))
		for i := range 60 {
			resp := envoy.must(t, req)
			if resp.OverallCode != rlsv3.RateLimitResponse_OK || len(resp.Statuses) != 1 ||
				resp.Statuses[0].LimitRemaining != uint32(59-i) {
				t.Fatalf("call %d: %v", i+1, resp)
			}
		}
		resp := envoy.must(t, req)
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || resp.Statuses[0].Code != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Fatalf("61st: %v, want OVER_LIMIT", resp)
		}
		lim := resp.Statuses[0].CurrentLimit
		if lim.GetName() != "hourly" || lim.GetRequestsPerUnit() != 60 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_HOUR {
			t.Errorf("current_limit %v, want hourly 60 per HOUR", lim)
		}
		if d := resp.Statuses[0].DurationUntilReset.AsDuration(); d <= 0 || d > time.Hour {
			t.Errorf("duration_until_reset %v", d)
		}
		h := headerMap(resp.ResponseHeadersToAdd)
		if h["ratelimit-policy"] != `"hourly";q=60;w=3600` || h["x-ratelimit-remaining"] != "0" || h["x-ratelimit-limit"] != "60" ||
			h["x-tollgate-reason"] != "rate_limited" || !limitHeader.MatchString(h["ratelimit"]) {
			t.Errorf("response headers %v", h)
		}
		if ra, _ := strconv.Atoi(h["retry-after"]); ra < 59 || ra > 60 {
			t.Errorf("retry-after %q, want 60", h["retry-after"])
		}
		// Envoy adds x-envoy-ratelimited to its own 429; the service must
		// not claim it on other answers.
		if _, ok := h["x-envoy-ratelimited"]; ok {
			t.Error("the service set x-envoy-ratelimited")
		}
		if !strings.Contains(string(resp.RawBody), `"status":429`) {
			t.Errorf("raw_body %q, want a 429 problem", resp.RawBody)
		}
		// Another address is another caller.
		if resp := envoy.must(t, rlRequest(descriptor("remote_address", "203.0.113.2"))); resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Errorf("another address: %v", resp.OverallCode)
		}
	})

	t.Run("api_key and the resource: the upstream learns the tenant", func(t *testing.T) {
		resp := envoy.must(t, rlRequest(descriptor("api_key", "Bearer "+f.keys["pro"], "header_match", "POST /v1/search")))
		if resp.OverallCode != rlsv3.RateLimitResponse_OK {
			t.Fatalf("%v", resp)
		}
		lim := resp.Statuses[0].CurrentLimit
		if lim.GetName() != "search" || lim.GetRequestsPerUnit() != 10 || lim.GetUnit() != rlsv3.RateLimitResponse_RateLimit_SECOND {
			t.Errorf("current_limit %v, want search 10 per SECOND", lim)
		}
		up := headerMap(resp.RequestHeadersToAdd)
		if up["x-tollgate-tenant"] != f.tenants["pro"].ID || up["x-tollgate-key-id"] != f.keyIDs["pro"] || up["x-tollgate-plan"] != "pro" {
			t.Errorf("request headers %v", up)
		}
		if h := headerMap(resp.ResponseHeadersToAdd); h["ratelimit-policy"] != `"search";q=10;w=1` || h["retry-after"] != "" {
			t.Errorf("response headers %v", h)
		}
		// :method and :path as request_headers entries give the resource
		// as forward-auth does.
		resp = envoy.must(t, rlRequest(descriptor("api_key", f.keys["pro"], "method", "post", "path", "/v1//search/?q=go")))
		if resp.Statuses[0].CurrentLimit.GetName() != "search" {
			t.Errorf("method and path: %v, want the search rule", resp.Statuses[0].CurrentLimit)
		}
	})

	t.Run("hits_addend is the cost", func(t *testing.T) {
		req := rlRequest(descriptor("remote_address", "203.0.113.3"))
		req.HitsAddend = 60
		if resp := envoy.must(t, req); resp.OverallCode != rlsv3.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 0 {
			t.Fatalf("60 hits: %v", resp)
		}
		req.HitsAddend = 0 // unset: one hit
		if resp := envoy.must(t, req); resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT {
			t.Errorf("one more: %v, want OVER_LIMIT", resp.OverallCode)
		}
		// A descriptor's own hits_addend overrides the request's.
		d := descriptor("remote_address", "203.0.113.4")
		d.HitsAddend = wrapperspb.UInt64(0)
		if resp := envoy.must(t, rlRequest(d)); resp.Statuses[0].LimitRemaining != 60 {
			t.Errorf("0 hits: remaining %d, want 60 (a peek)", resp.Statuses[0].LimitRemaining)
		}
	})

	t.Run("several descriptors: one over the limit is OVER_LIMIT", func(t *testing.T) {
		resp := envoy.must(t, rlRequest(
			descriptor("api_key", f.keys["free"]),
			descriptor("remote_address", "203.0.113.3"), // spent above
			descriptor("generic_key", "not Tollgate's"),
		))
		if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || len(resp.Statuses) != 3 ||
			resp.Statuses[0].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[1].Code != rlsv3.RateLimitResponse_OVER_LIMIT ||
			resp.Statuses[2].Code != rlsv3.RateLimitResponse_OK || resp.Statuses[2].CurrentLimit != nil {
			t.Errorf("%v", resp)
		}
		if h := headerMap(resp.ResponseHeadersToAdd); h["x-tollgate-reason"] != "rate_limited" || h["retry-after"] == "" {
			t.Errorf("the denial should govern the headers: %v", h)
		}
	})

	t.Run("a revoked key is OVER_LIMIT with its reason", func(t *testing.T) {
		revoked := f.revokedKey(t)
		waitFor(t, func() bool {
			resp := envoy.must(t, rlRequest(descriptor("api_key", revoked)))
			return resp.OverallCode == rlsv3.RateLimitResponse_OVER_LIMIT && headerMap(resp.ResponseHeadersToAdd)["x-tollgate-reason"] == "key_revoked"
		})
	})

	t.Run("bad calls", func(t *testing.T) {
		if _, err := envoy.call(t, rlRequest()); status.Code(err) != codes.InvalidArgument {
			t.Errorf("no descriptors: %v, want InvalidArgument", err)
		}
	})
}

// TestEnvoyRateLimitServiceDegraded: with Redis down the service decides
// as /v1/check does: fail-open rules answer OK (marked degraded),
// fail-closed ones OVER_LIMIT with retry-after 1, so that Envoy's answer
// is a 429 and not its failure mode.
func TestEnvoyRateLimitServiceDegraded(t *testing.T) {
	f := newFixture(t)
	strictKey := f.failClosedKey(t)
	addrs := f.startAPIAddrs(t, map[string]string{"TOLLGATE_ENVOY_GRPC_ADDR": "127.0.0.1:0",
		"TOLLGATE_REDIS_ADDR": "127.0.0.1:1", "TOLLGATE_REDIS_TIMEOUT": "100ms"})
	envoy := dialEnvoy(t, addrs[1], f.token)

	resp := envoy.must(t, rlRequest(descriptor("api_key", f.keys["pro"])))
	if h := headerMap(resp.ResponseHeadersToAdd); resp.OverallCode != rlsv3.RateLimitResponse_OK || h["x-tollgate-degraded"] != "true" {
		t.Errorf("fail-open: %v %v, want OK and degraded", resp.OverallCode, h)
	}
	resp = envoy.must(t, rlRequest(descriptor("api_key", strictKey)))
	h := headerMap(resp.ResponseHeadersToAdd)
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || h["x-tollgate-reason"] != "unavailable" || h["retry-after"] != "1" {
		t.Errorf("fail-closed: %v %v, want OVER_LIMIT, unavailable, retry-after 1", resp.OverallCode, h)
	}
}
