package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/client"
)

// TestCompletionSettlesTheTokensItStreamed: the check holds max_tokens and
// the settlement is the number of words streamed.
func TestCompletionSettlesTheTokensItStreamed(t *testing.T) {
	var held float64
	settled := make(chan float64, 1)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/settle" {
			settled <- body["cost"].(float64)
			io.WriteString(w, `{"hold_id":"h","estimate":50,"cost":6,"status":"settled","repeated":false}`)
			return
		}
		held = body["cost"].(float64)
		io.WriteString(w, `{"allowed":true,"reason":"ok","tier":"authenticated","retry_after_ms":0,"degraded":false,"rules":[],"hold_id":"h"}`)
	}))
	defer api.Close()
	tg, err := client.New(api.URL, "service-token", client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	svc := httptest.NewServer(routes(tg, 0))
	defer svc.Close()
	req, _ := http.NewRequest(http.MethodPost, svc.URL+"/v1/complete?max_tokens=50", strings.NewReader("tell me a story"))
	req.Header.Set("Authorization", "Bearer tg_key")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got := strings.Fields(string(out)); len(got) != 8 {
		t.Errorf("streamed %q, want 8 words", out)
	}
	if held != 50 {
		t.Errorf("held %v, want max_tokens 50", held)
	}
	if got := <-settled; got != 8 {
		t.Errorf("settled at %v, want the 8 tokens streamed", got)
	}
}
