package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/demo"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestSinkPrintsDeliveries: a delivery is answered 200 and printed with
// its path, webhook-id, type and tenant.
func TestSinkPrintsDeliveries(t *testing.T) {
	var out testenv.LogBuffer
	addr, stop := testenv.Start(t, "webhook-sink", func(ctx context.Context, ready chan<- string) error {
		return run(ctx, []string{"-addr", "127.0.0.1:0"}, &out, io.Discard, ready)
	})
	req, err := http.NewRequest("POST", "http://"+addr+"/operator",
		strings.NewReader(`{"id":"evt_1","type":"key.revoked","tenant_id":"t-1","data":{}}`))
	testenv.Must(t, err)
	req.Header.Set("webhook-id", "evt_1")
	res, err := http.DefaultClient.Do(req)
	testenv.Must(t, err)
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("status %d, want 200", res.StatusCode)
	}
	testenv.Must(t, stop())
	if got := out.String(); !strings.Contains(got, " /operator evt_1 key.revoked tenant=t-1\n") {
		t.Errorf("printed %q, want the delivery's line", got)
	}
}

// TestSinkListensOnLoopbackOnly: any other address is refused.
func TestSinkListensOnLoopbackOnly(t *testing.T) {
	for _, addr := range []string{"0.0.0.0:0", ":0", "192.0.2.1:0", "localhost:0"} {
		if err := run(context.Background(), []string{"-addr", addr}, io.Discard, io.Discard, nil); err == nil ||
			!strings.Contains(err.Error(), "loopback") {
			t.Errorf("-addr %s: %v, want refused for not being a loopback address", addr, err)
		}
	}
}

// TestSinkIsWhereTheDemoSends: the sink's default address is the demo
// endpoints'.
func TestSinkIsWhereTheDemoSends(t *testing.T) {
	if want := "http://" + defaultAddr; demo.ReceiverURL != want {
		t.Errorf("demo.ReceiverURL = %s, want %s", demo.ReceiverURL, want)
	}
}
