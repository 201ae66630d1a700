package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/plans"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// TestWebhookSurvivesKill: an admin process killed (SIGKILL) in the
// middle of a delivery loses nothing: once another process runs, the
// event is delivered, with the same webhook-id.
func TestWebhookSurvivesKill(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	db, err := postgres.Open(context.Background(), dbURL)
	testenv.Must(t, err)
	t.Cleanup(db.Close)
	ctx := context.Background()

	var mu sync.Mutex
	var delivered []string
	held := make(chan string, 1)
	var first atomic.Bool
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("webhook-id")
		_, _ = io.ReadAll(r.Body) // so that the server notices the connection closing
		if first.CompareAndSwap(false, true) {
			held <- id // the first attempt hangs until its sender dies
			<-r.Context().Done()
			return
		}
		mu.Lock()
		delivered = append(delivered, id)
		mu.Unlock()
	}))
	t.Cleanup(rcv.Close)

	p, err := plans.NewStore(db).Create(ctx, plans.Plan{Name: "basic"})
	testenv.Must(t, err)
	acme, err := tenants.NewStore(db).Create(ctx, "acme", p.ID)
	testenv.Must(t, err)
	_, err = events.NewOps(db, nil, events.Guard{AllowPrivate: true}).CreateEndpoint(ctx, audit.CLI, acme.ID,
		events.EndpointInput{URL: rcv.URL})
	testenv.Must(t, err)

	start := func() *exec.Cmd {
		addr := testenv.FreeAddr(t)
		cmd := exec.Command(admintest.Binary(t, "cmd/admin"), "serve")
		for k, v := range admintest.Settings(dbURL, map[string]string{"TOLLGATE_ADMIN_ADDR": addr, "TOLLGATE_WEBHOOK_TIMEOUT": "1s"}) {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		testenv.Must(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	killed := start()
	_, err = tenants.NewOps(db, nil).Suspend(ctx, audit.CLI, acme.ID) // tenant.suspended
	testenv.Must(t, err)
	var id string
	select {
	case id = <-held:
	case <-time.After(30 * time.Second):
		t.Fatal("the first admin process never sent the event")
	}
	testenv.Must(t, killed.Process.Kill())
	_ = killed.Wait()
	var state string
	var attempts int
	testenv.Must(t, db.QueryRow(ctx, `SELECT state, attempts FROM webhook_deliveries WHERE event_id = $1`, id).Scan(&state, &attempts))
	if state != "pending" || attempts != 0 {
		t.Fatalf("after the kill the delivery is %s after %d attempts, want pending, none recorded", state, attempts)
	}

	start()
	testenv.Eventually(t, time.Now(), 60*time.Second, "the event delivered after the restart", func() (bool, string) {
		testenv.Must(t, db.QueryRow(ctx, `SELECT state FROM webhook_deliveries WHERE event_id = $1`, id).Scan(&state))
		return state == "delivered", state
	})
	mu.Lock()
	defer mu.Unlock()
	if len(delivered) != 1 || delivered[0] != id {
		t.Errorf("delivered %v after the restart, want [%s] (the same webhook-id)", delivered, id)
	}
}

func TestWebhooksDisableEnableRotateDelete(t *testing.T) {
	dbURL, _ := cliDB(t)
	var made events.IssuedEndpoint
	out, err := runAdmin(t, dbURL, "", "webhooks", "create", "--url", "https://hooks.example.com/cli", "--json")
	testenv.Must(t, err)
	testenv.Must(t, json.Unmarshal([]byte(out), &made))
	id := made.Endpoint.ID
	endpoint := func() events.Endpoint {
		t.Helper()
		var list []events.Endpoint
		out, err := runAdmin(t, dbURL, "", "webhooks", "list", "--json")
		testenv.Must(t, err)
		testenv.Must(t, json.Unmarshal([]byte(out), &list))
		if len(list) != 1 {
			t.Fatalf("webhooks list: %s", out)
		}
		return list[0]
	}

	// Without --json, a table (an operator's endpoint: no tenant).
	if out, err := runAdmin(t, dbURL, "", "webhooks", "list"); err != nil ||
		!strings.Contains(out, "ID") || !strings.Contains(out, id+"  -") || !strings.Contains(out, "https://hooks.example.com/cli") {
		t.Errorf("webhooks list: %q, %v; want a table naming the endpoint", out, err)
	}
	out, err = runAdmin(t, dbURL, "", "webhooks", "disable", "--endpoint", id)
	if err != nil || !strings.Contains(out, "endpoint "+id+" → https://hooks.example.com/cli disabled") || endpoint().DisabledAt == nil {
		t.Errorf("webhooks disable: %q, %v; endpoint %+v", out, err, endpoint())
	}
	var enabled events.Endpoint
	out, err = runAdmin(t, dbURL, "", "webhooks", "enable", "--endpoint", id, "--json")
	testenv.Must(t, err)
	testenv.Must(t, json.Unmarshal([]byte(out), &enabled))
	if enabled.ID != id || enabled.DisabledAt != nil || endpoint().DisabledAt != nil {
		t.Errorf("webhooks enable --json: %+v", enabled)
	}

	// The new secret alone on stdout, once; the previous one keeps
	// signing for a while.
	out, err = runAdmin(t, dbURL, "", "webhooks", "rotate-secret", "--endpoint", id)
	secret := strings.TrimSpace(out)
	if err != nil || !strings.HasPrefix(secret, "whsec_") || strings.Contains(secret, "\n") || secret == made.Secret ||
		endpoint().PreviousSecretUntil == nil {
		t.Errorf("webhooks rotate-secret: %q, %v; endpoint %+v", out, err, endpoint())
	}
	var rotated events.IssuedEndpoint
	out, err = runAdmin(t, dbURL, "", "webhooks", "rotate-secret", "--endpoint", id, "--json")
	testenv.Must(t, err)
	testenv.Must(t, json.Unmarshal([]byte(out), &rotated))
	if rotated.Endpoint.ID != id || !strings.HasPrefix(rotated.Secret, "whsec_") || rotated.Secret == secret {
		t.Errorf("webhooks rotate-secret --json: %s", out)
	}

	out, err = runAdmin(t, dbURL, "", "webhooks", "delete", "--endpoint", id)
	if err != nil || !strings.Contains(out, "endpoint "+id+" → https://hooks.example.com/cli deleted") {
		t.Errorf("webhooks delete: %q, %v", out, err)
	}
	if out, err := runAdmin(t, dbURL, "", "webhooks", "list", "--json"); err != nil || strings.TrimSpace(out) != "[]" {
		t.Errorf("webhooks list after delete: %q, %v", out, err)
	}
	for _, cmd := range []string{"disable", "enable", "delete", "rotate-secret"} {
		wantRefused(t, dbURL, []string{"webhooks", cmd, "--endpoint", id}, "--endpoint", "not")
		wantRefused(t, dbURL, []string{"webhooks", cmd}, "--endpoint is required")
	}
}
