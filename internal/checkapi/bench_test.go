package checkapi

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/enforce"
	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/limiter/redisstore"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// benchSetup returns a handler chain (service-token auth + check) on store,
// a valid service token, and n API keys of a tenant on the demo pro plan.
func benchSetup(b *testing.B, store limiter.Store, prefix string, n int) (http.Handler, string, []string) {
	b.Helper()
	pub, priv, _ := ed25519.GenerateKey(rand.Reader)
	var pro plans.Plan
	for _, p := range plans.DemoPlans() {
		if p.Name == "pro" {
			pro = p
		}
	}
	pro.ID = 1
	d := enforce.Data{
		Plans:         []plans.Plan{pro},
		Tenants:       []tenants.Tenant{{ID: "tenant-1", Name: "bench", PlanID: 1, Status: tenants.StatusActive}},
		SigningKeys:   map[string]ed25519.PublicKey{"k1": pub},
		ServiceTokens: []auth.ServiceToken{{ID: "st-1", Name: "bench"}},
	}
	var secrets []string
	for i := range n {
		secret, hash, prefix := tenants.GenerateKey()
		secrets = append(secrets, secret)
		d.Keys = append(d.Keys, tenants.Key{ID: fmt.Sprintf("key-%d", i), TenantID: "tenant-1", Hash: hash, Prefix: prefix})
	}
	tok := jwt.NewWithClaims(jwt.SigningMethodEdDSA, jwt.RegisteredClaims{Issuer: auth.Issuer,
		Audience: jwt.ClaimStrings{auth.CheckAudience}, ID: "st-1", ExpiresAt: jwt.NewNumericDate(time.Now().Add(time.Hour))})
	tok.Header["kid"] = "k1"
	token, _ := tok.SignedString(priv)

	log := slog.New(slog.DiscardHandler)
	holder := enforce.NewHolder(enforce.StaticSource{Data: d}, log)
	if err := holder.Reload(context.Background()); err != nil {
		b.Fatal(err)
	}
	checker := enforce.NewChecker(holder, store, enforce.CheckerConfig{Prefix: prefix, StoreTimeout: time.Second, Log: log})
	return RequireServiceToken(enforce.NewTokenVerifier(holder), log)(HandleCheck(checker, log)), token, secrets
}

func benchStores(b *testing.B) map[string]func() (limiter.Store, string) {
	return map[string]func() (limiter.Store, string){
		"memory": func() (limiter.Store, string) { return limiter.NewMemoryStore(nil), "bench:" },
		"redis": func() (limiter.Store, string) {
			c, prefix := testenv.Redis(b)
			return redisstore.New(c), prefix
		},
		"redis-autopipeline": func() (limiter.Store, string) {
			c, prefix := testenv.Redis(b)
			ap, err := c.AutoPipeline()
			if err != nil {
				b.Fatal(err)
			}
			return redisstore.New(ap), prefix
		},
	}
}

// BenchmarkCheck measures one POST /v1/check through the service-token
// middleware and the handler: JSON in, one store call, JSON and headers
// out. Keys are spread over 1000 API keys so that few checks are denied.
func BenchmarkCheck(b *testing.B) {
	for _, name := range []string{"memory", "redis", "redis-autopipeline"} {
		for _, parallel := range []bool{false, true} {
			label := name + "/serial"
			if parallel {
				label = name + "/parallel"
			}
			b.Run(label, func(b *testing.B) {
				store, prefix := benchStores(b)[name]()
				h, token, keys := benchSetup(b, store, prefix, 1000)
				bodies := make([]string, len(keys))
				for i, k := range keys {
					bodies[i] = `{"key":"` + k + `","resource":"GET /repos"}`
				}
				one := func(i int) {
					req := httptest.NewRequest(http.MethodPost, "/v1/check", strings.NewReader(bodies[i%len(bodies)]))
					req.Header.Set("Authorization", "Bearer "+token)
					w := httptest.NewRecorder()
					h.ServeHTTP(w, req)
					if w.Code != http.StatusOK {
						b.Fatalf("status %d: %s", w.Code, w.Body)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				if !parallel {
					for i := 0; b.Loop(); i++ {
						one(i)
					}
					return
				}
				b.SetParallelism(32)
				b.RunParallel(func(pb *testing.PB) {
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
