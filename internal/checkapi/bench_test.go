package checkapi

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
	"github.com/tollgate/tollgate/internal/snapshot"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// benchSetup returns a handler chain (service-token auth + check) on store,
// a valid service token, and n API keys of a tenant on the demo pro plan.
func benchSetup(b testing.TB, store limiter.Store, prefix string, n int) (http.Handler, string, []string) {
	b.Helper()
	return benchSetupQuota(b, store, prefix, n, "", []quota.Threshold{{Percent: 50}, {Percent: 80}, {Remaining: 1000}, {Percent: 100}})
}

// benchSetupQuota is benchSetup with the pro plan's quota mode (the demo
// plan's when "") and thresholds.
func benchSetupQuota(b testing.TB, store limiter.Store, prefix string, n int, mode plans.QuotaMode,
	thresholds []quota.Threshold) (http.Handler, string, []string) {
	b.Helper()
	var pro, anonymous plans.Plan
	for _, p := range plans.DemoPlans() {
		switch p.Name {
		case "pro":
			pro = p
		case plans.AnonymousPlan:
			anonymous = p
		}
	}
	pro.ID, anonymous.ID = 1, 2
	if mode != "" {
		pro.QuotaMode = mode
	}
	d := snapshot.Data{
		Plans:   []plans.Plan{pro, anonymous},
		Tenants: []tenants.Tenant{{ID: "tenant-1", Name: "bench", PlanID: 1, Status: tenants.StatusActive}},
		// Thresholds on the monthly quota: each allowed check looks for
		// crossings.
		Quota: quota.All{Plans: map[int64]quota.PlanSettings{1: {PlanID: 1, Thresholds: thresholds}}},
	}
	var secrets []string
	for range n {
		secrets = append(secrets, addKey(&d, "tenant-1"))
	}
	token := addServiceToken(b, &d, "bench")

	log := slog.New(slog.DiscardHandler)
	holder, checker := newChecker(b, d, store, prefix, log)
	return RequireServiceToken(enforce.NewTokenVerifier(holder), log)(HandleCheck(checker, log)), token, secrets
}

// addKey adds an API key of tenant to d, its ID key-N after the keys d
// holds, and returns its secret.
func addKey(d *snapshot.Data, tenant string) string {
	secret, hash, prefix := tenants.GenerateKey()
	d.Keys = append(d.Keys, tenants.Key{ID: fmt.Sprintf("key-%d", len(d.Keys)), TenantID: tenant, Hash: hash, Prefix: prefix})
	return secret
}

// addServiceToken adds a signing key (k1) and the service token st-1,
// named name, to d, and returns that token signed with the key for the
// check server, valid for an hour.
func addServiceToken(tb testing.TB, d *snapshot.Data, name string) string {
	tb.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	d.SigningKeys = map[string]ed25519.PublicKey{"k1": pub}
	d.ServiceTokens = append(d.ServiceTokens, auth.ServiceToken{ID: "st-1", Name: name})
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Issuer: auth.Issuer,
		Audience: jwt.ClaimStrings{auth.CheckAudience}, ID: "st-1", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))})
	tok.Header["kid"] = "k1"
	token, err := tok.SignedString(priv)
	if err != nil {
		tb.Fatal(err)
	}
	return token
}

// newChecker loads d into a snapshot holder and returns the holder and a
// checker of it on store under prefix (a store call may take a second).
func newChecker(tb testing.TB, d snapshot.Data, store limiter.Store, prefix string, log *slog.Logger) (*snapshot.Holder, *enforce.Checker) {
	tb.Helper()
	holder := snapshot.NewHolder(snapshot.StaticSource(d), log)
	if err := holder.Reload(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return holder, enforce.NewChecker(holder, store, enforce.CheckerConfig{Prefix: prefix, StoreTimeout: time.Second, Log: log})
}

func benchStores(b *testing.B) map[string]func() (limiter.Store, string) {
	return map[string]func() (limiter.Store, string){
		"memory": func() (limiter.Store, string) { return limiter.NewMemoryStore(nil), "bench:" },
		"redis": func() (limiter.Store, string) {
			c, prefix := testenv.Redis(b)
			return redisstore.New(c), prefix
		},
		"redis-batching": func() (limiter.Store, string) {
			c, prefix := testenv.Redis(b)
			return redisstore.NewBatching(c, redisstore.BatchConfig{Timeout: time.Second}), prefix
		},
	}
}

// benchWriter is a ResponseWriter that keeps nothing, reused from one
// check to the next: the benchmark measures the handler, not a recorder
// (net/http's own per-request work is not the handler's either).
type benchWriter struct {
	h    http.Header
	code int
}

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(code int)        { w.code = code }

// BenchmarkCheck measures one POST /v1/check through the service-token
// middleware and the handler: JSON in, the store (or the local denials),
// JSON and headers out. "allowed" spreads checks over 1000 API keys of the
// pro plan, so that few are denied; "denied" is one anonymous IP far over
// its limit (60 an hour), which after the first denial is answered
// without the store. The request and writer are reused, so allocations
// are the handler's own.
//
//	scripts/services.sh test -- go test ./internal/checkapi/ -run '^$' -bench Check -benchmem
func BenchmarkCheck(b *testing.B) {
	for _, name := range []string{"memory", "redis", "redis-batching"} {
		for _, traffic := range []string{"allowed", "denied"} {
			for _, parallel := range []bool{false, true} {
				label := name + "/" + traffic + "/serial"
				if parallel {
					label = name + "/" + traffic + "/parallel"
				}
				b.Run(label, func(b *testing.B) {
					store, prefix := benchStores(b)[name]()
					h, token, keys := benchSetup(b, store, prefix, 1000)
					var bodies [][]byte
					if traffic == "allowed" {
						for _, k := range keys {
							bodies = append(bodies, []byte(`{"key":"`+k+`","resource":"GET /repos"}`))
						}
					} else {
						bodies = [][]byte{[]byte(`{"ip":"192.0.2.77","resource":"GET /"}`)}
					}
					newClient := func() func(i int) {
						body := bytes.NewReader(nil)
						req := httptest.NewRequest(http.MethodPost, "/v1/check", nil)
						req.Header.Set("Authorization", "Bearer "+token)
						req.Body = io.NopCloser(body)
						w := &benchWriter{h: http.Header{}}
						return func(i int) {
							body.Reset(bodies[i%len(bodies)])
							clear(w.h)
							h.ServeHTTP(w, req)
							if w.code != http.StatusOK {
								b.Fatalf("status %d", w.code)
							}
						}
					}
					if traffic == "denied" { // spend the allowance first
						one := newClient()
						for i := range 61 {
							one(i)
						}
					}
					b.ReportAllocs()
					b.ResetTimer()
					if !parallel {
						one := newClient()
						for i := 0; b.Loop(); i++ {
							one(i)
						}
						return
					}
					b.SetParallelism(32)
					b.RunParallel(func(pb *testing.PB) {
						one := newClient()
						i := int(time.Now().UnixNano())
						for pb.Next() {
							i++
							one(i)
						}
					})
				})
			}
		}
	}
}
