package serve

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/client"
)

func TestRunNamesMissingSettings(t *testing.T) {
	routes := func(*client.Client) http.Handler { return http.NotFoundHandler() }
	env := map[string]string{"TOLLGATE_URL": "http://127.0.0.1:8080"}
	err := Run(context.Background(), "test", ":0", routes, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_SERVICE_TOKEN") {
		t.Errorf("run error = %v, want one naming TOLLGATE_SERVICE_TOKEN", err)
	}
	env = map[string]string{"TOLLGATE_URL": "127.0.0.1:8080", "TOLLGATE_SERVICE_TOKEN": "t"}
	err = Run(context.Background(), "test", ":0", routes, func(k string) string { return env[k] }, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "TOLLGATE_URL") {
		t.Errorf("run error = %v, want one naming TOLLGATE_URL", err)
	}
}

// TestRunStopsWhenItsContextEnds: the service shuts down gracefully and
// Run returns nil.
func TestRunStopsWhenItsContextEnds(t *testing.T) {
	env := map[string]string{"TOLLGATE_URL": "http://127.0.0.1:8080", "TOLLGATE_SERVICE_TOKEN": "t", "ADDR": "127.0.0.1:0"}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var out strings.Builder
	routes := func(*client.Client) http.Handler { return http.NotFoundHandler() }
	if err := Run(ctx, "test", ":0", routes, func(k string) string { return env[k] }, &out); err != nil {
		t.Errorf("Run = %v, want nil", err)
	}
	if want := "test: listening on 127.0.0.1:0, checking with http://127.0.0.1:8080\n"; out.String() != want {
		t.Errorf("Run wrote %q, want %q", out.String(), want)
	}
}
