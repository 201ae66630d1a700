package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tollgate/tollgate/client"
)

// checkAPI allows a caller once, then denies with a 30 s wait.
func checkAPI(t *testing.T) *httptest.Server {
	t.Helper()
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer service-token" {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("RateLimit-Policy", `"hourly";q=1;w=3600`)
		if calls.Add(1) == 1 {
			w.Header().Set("RateLimit", `"hourly";r=0;t=3600`)
			io.WriteString(w, `{"allowed":true,"reason":"ok","tier":"anonymous","limit":1,"remaining":0,"reset_after_ms":3600000,
				"retry_after_ms":0,"policy":"hourly","degraded":false,"rules":[]}`)
			return
		}
		w.Header().Set("Retry-After", "30")
		io.WriteString(w, `{"allowed":false,"reason":"rate_limited","tier":"anonymous","limit":1,"remaining":0,"reset_after_ms":3600000,
			"retry_after_ms":30000,"policy":"hourly","degraded":false,"rules":[]}`)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRoutes(t *testing.T) {
	tg, err := client.New(checkAPI(t).URL, "service-token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	service := routes(tg)
	cases := []struct {
		path       string
		wantStatus int
		wantBody   string
		wantHeader string // RateLimit-Policy
	}{
		{"/hello", 200, "hello, anonymous caller: 0 of 1 left (hourly)", `"hourly";q=1;w=3600`},
		{"/hello", 429, `"code":"rate_limited"`, `"hourly";q=1;w=3600`},
		{"/healthz", 200, "ok", ""},
	}
	for _, c := range cases {
		w := httptest.NewRecorder()
		service.ServeHTTP(w, httptest.NewRequest("GET", c.path, nil))
		if w.Code != c.wantStatus || !strings.Contains(w.Body.String(), c.wantBody) || w.Header().Get("RateLimit-Policy") != c.wantHeader {
			t.Errorf("GET %s = %d %q (RateLimit-Policy %q), want %d containing %q (%q)",
				c.path, w.Code, w.Body, w.Header().Get("RateLimit-Policy"), c.wantStatus, c.wantBody, c.wantHeader)
		}
	}
}
