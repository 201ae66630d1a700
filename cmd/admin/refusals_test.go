package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/testenv"
	"github.com/tollgate/tollgate/internal/testenv/admintest"
)

// TestCLIMessagesReadAsTheREADMEShows runs the built CLI as the README's
// examples do and reads what it prints: a refusal naming fields prints
// one "field: problem" line each, sorted, never a Go map; an endpoint on
// the demo's webhook receiver is refused in a sentence that names the
// setting that allows it, and made once that setting (as make env
// exports it) lists it; a replay of one event says "1 delivery".
func TestCLIMessagesReadAsTheREADMEShows(t *testing.T) {
	dbURL, srv := cliDB(t)
	bin := admintest.Binary(t, "cmd/admin")
	cli := func(env map[string]string, args ...string) (stdout, stderr string, err error) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		for k, v := range admintest.Settings(dbURL, map[string]string{"TOLLGATE_WEBHOOK_ALLOW_PRIVATE": "false"}, env) {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		err = cmd.Run()
		return out.String(), errOut.String(), err
	}

	_, stderr, err := cli(nil, "plans", "create", "--name", "team",
		"--rules", `[{"name": "hourly", "limit": -1, "burst": -1, "period_us": 3600000000}]`)
	want := "admin: plans create: invalid: the request has invalid fields:\n" +
		"  rules[0].burst: "
	if err == nil || !strings.HasPrefix(stderr, want) || strings.Contains(stderr, "map[") {
		t.Errorf("plans create with invalid rules: %v, printed\n%s\nwant it to start with\n%s", err, stderr, want)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")[1:]
	if !slices.IsSorted(lines) || !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  rules[0].limit: must be") }) {
		t.Errorf("plans create with invalid rules printed the fields %q, want one line each, sorted, rules[0].limit among them", lines)
	}

	receiver := "http://127.0.0.1:8082/mine"
	_, stderr, err = cli(nil, "webhooks", "create", "--url", receiver)
	want = "url: must not point to 127.0.0.1:8082, a loopback, private or link-local address that TOLLGATE_WEBHOOK_ALLOW_ADDRS does not list"
	if err == nil || !strings.Contains(stderr, want) {
		t.Errorf("webhooks create --url %s: %v, printed %q, want %q in it", receiver, err, stderr, want)
	}
	out, stderr, err := cli(map[string]string{"TOLLGATE_WEBHOOK_ALLOW_ADDRS": "127.0.0.1:8082"}, "webhooks", "create", "--url", receiver, "--json")
	if err != nil {
		t.Fatalf("webhooks create --url %s with TOLLGATE_WEBHOOK_ALLOW_ADDRS: %v\n%s", receiver, err, stderr)
	}
	var made events.IssuedEndpoint
	testenv.Must(t, json.Unmarshal([]byte(out), &made))

	mustRun(t, dbURL, "plans", "create", "--name", "basic")
	mustRun(t, dbURL, "tenants", "create", "--name", "acme", "--plan", "basic")
	mustRun(t, dbURL, "tenants", "suspend", "--tenant", "acme")
	var eventID string
	testenv.Must(t, srv.DB.QueryRow(context.Background(), `SELECT id FROM events ORDER BY created_at DESC LIMIT 1`).Scan(&eventID))
	out, stderr, err = cli(nil, "webhooks", "replay", "--endpoint", made.Endpoint.ID, "--event", eventID)
	if want := "1 delivery queued for endpoint " + made.Endpoint.ID + "\n"; err != nil || out != want {
		t.Errorf("webhooks replay of one event: %v, printed %q%s, want %q", err, out, stderr, want)
	}
}

// TestWebhooksCreateRefusesBadSettings: webhooks create refuses a
// malformed TOLLGATE_WEBHOOK_* setting naming it, as admin serve does,
// instead of reading it as unset and refusing the URL for another reason.
func TestWebhooksCreateRefusesBadSettings(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	for _, tc := range []struct {
		name, key, value string
	}{
		{"an address that is not an IP", "TOLLGATE_WEBHOOK_ALLOW_ADDRS", "localhost:8082"},
		{"a flag that is not a boolean", "TOLLGATE_WEBHOOK_ALLOW_PRIVATE", "yes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_SECRET_KEY": testenv.SecretKey, tc.key: tc.value}
			var stdout bytes.Buffer
			err := run(context.Background(), []string{"webhooks", "create", "--url", "http://127.0.0.1:8082/mine"},
				func(k string) string { return env[k] }, strings.NewReader(""), &stdout, io.Discard, nil)
			if err == nil || !strings.Contains(err.Error(), tc.key) || strings.Contains(err.Error(), "url:") {
				t.Errorf("got %v, want an error naming %s, not the URL", err, tc.key)
			}
			if stdout.Len() > 0 {
				t.Errorf("printed %q: want no endpoint made", stdout.String())
			}
		})
	}
}
