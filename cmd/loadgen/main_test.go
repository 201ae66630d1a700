package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestDriveCountsDecisions runs the load generator against a stub check
// server that allows every other request.
func TestDriveCountsDecisions(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if n.Add(1)%2 == 0 {
			io.WriteString(w, `{"allowed":false}`)
			return
		}
		io.WriteString(w, `{"allowed":true}`)
	}))
	defer srv.Close()
	var out bytes.Buffer
	err := run(context.Background(), []string{"-url", srv.URL, "-c", "4", "-d", "5s", "-n", "100"},
		func(k string) string { return map[string]string{"TOLLGATE_TOKEN": "tok"}[k] }, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"requests=100 ", "allowed=50 ", "denied=50 ", "errors=0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report %q lacks %q", out.String(), want)
		}
	}
}

func TestRefusesRemoteTargets(t *testing.T) {
	err := run(context.Background(), []string{"-url", "http://192.0.2.1:8080", "-d", time.Second.String()},
		func(string) string { return "" }, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("got %v, want a refusal naming loopback", err)
	}
}
