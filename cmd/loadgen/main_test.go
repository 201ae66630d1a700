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

	"github.com/tollgate/tollgate/internal/testenv"
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
	for _, want := range []string{"requests=100 ", "allowed=50 ", "denied=50 ", "errors=0", "RESULT requests=100 "} {
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

// TestRateModeSendsAtTheOfferedRate: at 200 checks per second, 40 checks
// take about 200 ms, all of them answered.
func TestRateModeSendsAtTheOfferedRate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"allowed":true}`)
	}))
	defer srv.Close()
	var out bytes.Buffer
	err := run(context.Background(), []string{"-url", srv.URL, "-c", "4", "-d", "5s", "-n", "40", "-rate", "200"},
		func(string) string { return "" }, &out, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "requests=40 ") || !strings.Contains(out.String(), "allowed=40 ") {
		t.Errorf("report %q: want 40 requests, all allowed", out.String())
	}
}

// TestFloorAnswersJSON: the floor server reads any body and answers a
// fixed JSON object.
func TestFloorAnswersJSON(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	out := &testenv.LogBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"-floor", "127.0.0.1:0"}, func(string) string { return "" }, out, io.Discard)
	}()
	var addr string
	testenv.WaitFor(t, 5*time.Second, "the floor listening", func() bool {
		var ok bool
		addr, ok = strings.CutPrefix(strings.TrimSpace(out.String()), "floor listening on ")
		return ok
	})
	resp, err := http.Post("http://"+addr+"/v1/check", "application/json", strings.NewReader(`{"ip":"192.0.2.1"}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"allowed":true`) {
		t.Errorf("floor: %d %q", resp.StatusCode, body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("floor: %v", err)
	}
}
