package checkapi

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/tollgate/tollgate/internal/limiter"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/quota"
)

// BenchmarkCheckThresholds measures allowed checks of the pro plan with
// its monthly quota counted on the check path (quota_mode overage), with
// and without quota thresholds: what looking for crossings costs a check.
// The memory store keeps the store's own cost small beside it.
//
//	go test ./internal/checkapi/ -run '^$' -bench CheckThresholds -benchmem -count 5
func BenchmarkCheckThresholds(b *testing.B) {
	for _, c := range []struct {
		name       string
		thresholds []quota.Threshold
	}{
		{"none", nil},
		{"four", []quota.Threshold{{Percent: 50}, {Percent: 80}, {Remaining: 1000}, {Percent: 100}}},
	} {
		b.Run(c.name, func(b *testing.B) {
			h, token, keys := benchSetupQuota(b, limiter.NewMemoryStore(nil), "bench:", 1000, plans.QuotaOverage, c.thresholds)
			benchChecksOfKeys(b, h, token, keys)
		})
	}
}

// benchChecksOfKeys runs b's loop of checks of GET /repos through h, one
// key after the other, and fails on an answer other than 200.
func benchChecksOfKeys(b *testing.B, h http.Handler, token string, keys []string) {
	b.Helper()
	bodies := make([][]byte, len(keys))
	for i, k := range keys {
		bodies[i] = []byte(`{"key":"` + k + `","resource":"GET /repos"}`)
	}
	body := bytes.NewReader(nil)
	req := httptest.NewRequest(http.MethodPost, "/v1/check", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Body = io.NopCloser(body)
	w := &benchWriter{h: http.Header{}}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		body.Reset(bodies[i%len(bodies)])
		clear(w.h)
		h.ServeHTTP(w, req)
		if w.code != http.StatusOK {
			b.Fatalf("status %d", w.code)
		}
	}
}
