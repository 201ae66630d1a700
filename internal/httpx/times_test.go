package httpx

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tollgate/tollgate"
)

// TestJSONThatCannotBeEncoded: a value encoding/json refuses is a logged
// 500 problem, never the status asked for with an empty or cut body.
func TestJSONThatCannotBeEncoded(t *testing.T) {
	for name, v := range map[string]any{
		"year 10000":   map[string]any{"to": time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"year -1":      struct{ From time.Time }{time.Date(-1, 12, 31, 0, 0, 0, 0, time.UTC)},
		"NaN in lists": []any{1, math.NaN()},
	} {
		t.Run(name, func(t *testing.T) {
			var logged bytes.Buffer
			log := slog.New(slog.NewTextHandler(&logged, nil))
			w := httptest.NewRecorder()
			JSON(w, httptest.NewRequest(http.MethodGet, "/api/v1/statements", nil), log, http.StatusOK, v)
			var p Problem
			if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
				t.Fatalf("body %q: %v", w.Body, err)
			}
			if w.Code != http.StatusInternalServerError || p.Code != tollgate.EINTERNAL || w.Header().Get("Content-Type") != "application/problem+json" {
				t.Errorf("%d %s %+v, want a 500 problem", w.Code, w.Header().Get("Content-Type"), p)
			}
			if !strings.Contains(logged.String(), "internal error") || !strings.Contains(logged.String(), "/api/v1/statements") {
				t.Errorf("logged %q, want the internal error with its path", logged.String())
			}
		})
	}
	// One that encodes is written whole, as before.
	w := httptest.NewRecorder()
	JSON(w, httptest.NewRequest(http.MethodGet, "/", nil), nil, http.StatusCreated, map[string]string{"a": "<b>"})
	if got, want := w.Body.String(), "{\"a\":\"\\u003cb\\u003e\"}\n"; w.Code != http.StatusCreated || got != want ||
		w.Header().Get("Content-Type") != "application/json" {
		t.Errorf("%d %q %q, want 201 %q as application/json", w.Code, w.Header().Get("Content-Type"), got, want)
	}
}

// BenchmarkJSON measures an answer of a hold call's size; its buffer is
// pooled, so it allocates no more than encoding the value does.
//
//	go test ./internal/httpx/ -run '^$' -bench JSON -benchmem
func BenchmarkJSON(b *testing.B) {
	r := httptest.NewRequest(http.MethodPost, "/v1/settle", nil)
	v := struct {
		Allowed   bool   `json:"allowed"`
		Remaining int64  `json:"remaining"`
		HoldID    string `json:"hold_id"`
	}{true, 42, "0123456789abcdef"}
	w := discardWriter{http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		JSON(w, r, nil, http.StatusOK, v)
	}
}

type discardWriter struct{ h http.Header }

func (d discardWriter) Header() http.Header         { return d.h }
func (d discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (d discardWriter) WriteHeader(int)             {}

// TestTimeFieldsNamesTheField: a time outside the years 0000 to 9999 in
// UTC, wherever it sits in a body, is EINVALID naming it as the JSON does.
func TestTimeFieldsNamesTheField(t *testing.T) {
	far := time.Date(10000, 1, 1, 0, 59, 59, 0, time.UTC)
	early := time.Date(-1, 12, 31, 23, 0, 0, 0, time.UTC)
	ok := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	type window struct {
		From time.Time  `json:"from"`
		To   *time.Time `json:"to,omitempty"`
	}
	type body struct {
		Name      string                `json:"name"`
		ExpiresAt *time.Time            `json:"expires_at"`
		Windows   []window              `json:"windows"`
		ByName    map[string]*time.Time `json:"by_name"`
		Nullable  nullable              `json:"nullable"`
		Skipped   time.Time             `json:"-"`
	}
	cases := []struct {
		name  string
		v     any
		field string
	}{
		{"fine", &body{ExpiresAt: &ok, Windows: []window{{From: time.Time{}, To: &ok}}, Skipped: far}, ""},
		{"top level", &body{ExpiresAt: &far}, "expires_at"},
		{"before year 0", &body{ExpiresAt: &early}, "expires_at"},
		{"in a list", &body{Windows: []window{{From: ok}, {From: ok, To: &far}}}, "windows[1].to"},
		{"in a map", &body{ByName: map[string]*time.Time{"a": &ok, "b": &far}}, "by_name.b"},
		{"a wrapper that decodes itself", &body{Nullable: nullable{Set: true, Time: &far}}, "nullable"},
		{"the body", &far, "body"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := TimeFields(c.v)
			if c.field == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			var e *tollgate.Error
			if !errors.As(err, &e) || e.Code != tollgate.EINVALID || e.Fields[c.field] != tollgate.TimeRangeProblem {
				t.Errorf("got %v, want EINVALID naming %s", err, c.field)
			}
		})
	}
}

// nullable is a time that decodes itself, as the admin API's nullable
// fields do.
type nullable struct {
	Set  bool
	Time *time.Time
}

func (n *nullable) UnmarshalJSON(b []byte) error {
	n.Set = true
	return json.Unmarshal(b, &n.Time)
}
