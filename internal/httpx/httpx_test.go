package httpx

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tollgate/tollgate"
	"github.com/tollgate/tollgate/internal/testenv"
)

func TestErrorStatuses(t *testing.T) {
	cases := []struct {
		name   string
		err    error
		status int
		detail string
	}{
		{"invalid", tollgate.Invalid(map[string]string{"cost": "must be ≥ 0"}), 422, "the request has invalid fields"},
		{"not found", tollgate.Errorf(tollgate.ENOTFOUND, "tenant x not found"), 404, "tenant x not found"},
		{"internal detail hidden", errors.New("pq: password=hunter2"), 500, "internal error"},
		{"refused value", fmt.Errorf("tenants: create: %w", &pgconn.PgError{Code: "22021"}), 422, "cannot be stored"},
		{"other database error", fmt.Errorf("x: %w", &pgconn.PgError{Code: "40001"}), 500, "internal error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			Error(w, httptest.NewRequest(http.MethodGet, "/", nil), nil, c.err)
			var p Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatal(err)
			}
			if w.Code != c.status || p.Status != c.status || !strings.Contains(p.Detail, c.detail) {
				t.Errorf("got %d %+v, want %d with detail %q", w.Code, p, c.status, c.detail)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
				t.Errorf("Content-Type %q", ct)
			}
		})
	}
}

func TestDecodeNamesTheField(t *testing.T) {
	type body struct {
		Cost int64 `json:"cost"`
	}
	cases := map[string]struct {
		in     string
		status int
		field  string
	}{
		"wrong type":    {`{"cost":"x"}`, 400, "cost"},
		"unknown field": {`{"colour":1}`, 400, "colour"},
		"syntax":        {`{"cost":`, 400, "body"},
		"trailing":      {`{"cost":1} {}`, 400, "body"},
		"too large":     {`{"cost":` + strings.Repeat("1", 100) + `}`, 413, ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(c.in))
			err := Decode(r, 64, &body{})
			if got := Status(err); got != c.status {
				t.Fatalf("status %d, want %d (%v)", got, c.status, err)
			}
			if c.field != "" && testenv.Fields(err)[c.field] == "" {
				t.Errorf("error %v does not name %s", err, c.field)
			}
		})
	}
}

// TestMethodNotAllowed: a known path asked with another method is a 405
// problem naming the methods the path has in Allow.
func TestMethodNotAllowed(t *testing.T) {
	r := chi.NewRouter()
	r.MethodNotAllowed(MethodNotAllowed(r))
	r.NotFound(NotFound(nil))
	r.Get("/things/{id}", func(http.ResponseWriter, *http.Request) {})
	r.Delete("/things/{id}", func(http.ResponseWriter, *http.Request) {})
	for _, c := range []struct {
		method, path string
		status       int
		allow        string
	}{
		{"POST", "/things/7", http.StatusMethodNotAllowed, "GET, DELETE"},
		{"GET", "/nothing", http.StatusNotFound, ""},
	} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != c.status || rec.Header().Get("Allow") != c.allow {
			t.Errorf("%s %s = %d, Allow %q; want %d, Allow %q", c.method, c.path, rec.Code, rec.Header().Get("Allow"), c.status, c.allow)
		}
		if ct := rec.Header().Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("%s %s: Content-Type %q, want application/problem+json", c.method, c.path, ct)
		}
	}
}

func TestHealthzURL(t *testing.T) {
	for addr, want := range map[string]string{
		":8080":          "http://127.0.0.1:8080/healthz",
		"0.0.0.0:8081":   "http://127.0.0.1:8081/healthz",
		"[::]:8081":      "http://127.0.0.1:8081/healthz",
		"localhost:9000": "http://127.0.0.1:9000/healthz",
		"10.0.0.5:8080":  "http://10.0.0.5:8080/healthz",
		"[::1]:8080":     "http://[::1]:8080/healthz",
	} {
		if got, err := healthzURL(addr); err != nil || got != want {
			t.Errorf("healthzURL(%q) = %q, %v; want %q", addr, got, err, want)
		}
	}
	for _, addr := range []string{"8080", ":0", "127.0.0.1:"} {
		if _, err := healthzURL(addr); err == nil {
			t.Errorf("healthzURL(%q) succeeded; want an error", addr)
		}
	}
}
