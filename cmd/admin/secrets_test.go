package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tollgate/tollgate/internal/auth"
	"github.com/tollgate/tollgate/internal/demo"
	"github.com/tollgate/tollgate/internal/events"
	"github.com/tollgate/tollgate/internal/postgres"
	"github.com/tollgate/tollgate/internal/testenv"
)

// adminWith runs the CLI with exactly the settings env, and returns what
// it printed on stdout and stderr.
func adminWith(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err = run(context.Background(), args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut, nil)
	return out.String(), errOut.String(), err
}

// auditActions returns the action of every audit entry after entry id, by
// actor, in order ("cli signing_keys.retire").
func auditActions(t *testing.T, db postgres.Conn, after int64) []string {
	t.Helper()
	rows, err := db.Query(context.Background(), `SELECT actor || ' ' || action FROM audit_log WHERE id > $1 ORDER BY id`, after)
	testenv.Must(t, err)
	list, err := pgx.CollectRows(rows, pgx.RowTo[string])
	testenv.Must(t, err)
	return list
}

func lastAudit(t *testing.T, db postgres.Conn) int64 {
	t.Helper()
	var id int64
	testenv.Must(t, db.QueryRow(context.Background(), `SELECT coalesce(max(id), 0) FROM audit_log`).Scan(&id))
	return id
}

// TestLostSecretKeyRecovery follows the README's recovery from a lost
// TOLLGATE_SECRET_KEY to the end: with a new key, tokens issue and
// secrets reseal refuse and name secrets recover; secrets recover retires
// the signing key the lost key sealed (audited) and names the webhook
// endpoint whose secret is lost with it; then tokens issue again, the
// tokens from before and after both verify, secrets reseal passes over
// the retired key, and the endpoint, given a new secret, receives events
// signed with it.
func TestLostSecretKeyRecovery(t *testing.T) {
	ctx := context.Background()
	dbURL := testenv.DatabaseURL(t)
	db := openPool(t, dbURL)
	rcv := testenv.NewReceiver(t, nil)
	replacement := auth.GenerateSecretKey()
	withKey := func(key string) map[string]string {
		return map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_SECRET_KEY": key, "TOLLGATE_WEBHOOK_ALLOW_PRIVATE": "true"}
	}
	lost, found := withKey(testenv.SecretKey), withKey(replacement)

	before, _, err := adminWith(t, lost, "tokens", "issue", "--name", "edge")
	testenv.Must(t, err)
	out, _, err := adminWith(t, lost, "webhooks", "create", "--url", rcv.URL, "--json")
	testenv.Must(t, err)
	var created events.IssuedEndpoint
	testenv.Must(t, json.Unmarshal([]byte(out), &created))
	endpointID := created.Endpoint.ID

	// The key is lost: a new one is set.
	for _, args := range [][]string{{"tokens", "issue", "--name", "edge"}, {"secrets", "reseal"}} {
		if _, _, err := adminWith(t, found, args...); err == nil || !strings.Contains(err.Error(), "admin secrets recover") {
			t.Errorf("admin %s with the key lost: %v, want a refusal naming secrets recover", strings.Join(args, " "), err)
		}
	}
	last := lastAudit(t, db)
	out, errOut, err := adminWith(t, found, "secrets", "recover")
	testenv.Must(t, err)
	if !strings.Contains(out, "retired 1 that no configured key opens") || !strings.Contains(out, "(1 active) keep working") {
		t.Errorf("secrets recover printed %q, want the retired signing key and the token it signed", out)
	}
	if !strings.Contains(errOut, endpointID) || !strings.Contains(errOut, "admin webhooks rotate-secret") {
		t.Errorf("secrets recover warned %q, want the endpoint named with rotate-secret", errOut)
	}
	if got := auditActions(t, db, last); len(got) != 1 || got[0] != "cli signing_keys.retire" {
		t.Errorf("secrets recover wrote %v, want one signing_keys.retire entry", got)
	}

	after, _, err := adminWith(t, found, "tokens", "issue", "--name", "edge after")
	testenv.Must(t, err)
	public, err := auth.NewStore(db).PublicKeys(ctx)
	testenv.Must(t, err)
	for name, token := range map[string]string{"before": before, "after": after} {
		if _, _, err := auth.VerifyServiceToken(strings.TrimSpace(token), public, time.Now()); err != nil {
			t.Errorf("the token issued %s the recovery does not verify: %v", name, err)
		}
	}
	out, errOut, err = adminWith(t, found, "secrets", "reseal")
	if err != nil || !strings.Contains(out, "1 retired ones left as they are") || !strings.Contains(errOut, endpointID) {
		t.Errorf("secrets reseal after the recovery: %q %q %v; want the retired key passed over, the endpoint named", out, errOut, err)
	}

	out, errOut, err = adminWith(t, found, "webhooks", "rotate-secret", "--endpoint", endpointID)
	testenv.Must(t, err)
	secret := strings.TrimSpace(out)
	if !strings.Contains(errOut, "signs alone") {
		t.Errorf("webhooks rotate-secret with the old secret lost said %q, want that the new one signs alone", errOut)
	}
	testenv.Must(t, postgres.Tx(ctx, db, func(tx pgx.Tx) error {
		_, err := events.Emit(ctx, tx, events.Event{Type: events.WebhookEndpointDisabled, CreatedAt: time.Now(),
			Data: map[string]any{"n": 1}})
		return err
	}))
	keys, err := auth.ParseSecretKeys(replacement)
	testenv.Must(t, err)
	d := events.NewDeliverer(events.DelivererConfig{DB: db, Guard: events.Guard{AllowPrivate: true}, SecretKeys: keys})
	if n, err := d.DeliverDue(ctx); err != nil || n != 1 {
		t.Fatalf("DeliverDue: %d, %v; want one attempt", n, err)
	}
	reqs := rcv.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests after the rotation, want 1", len(reqs))
	}
	ts, err := strconv.ParseInt(reqs[0].Timestamp, 10, 64)
	testenv.Must(t, err)
	if want, _ := events.Signature(reqs[0].ID, time.Unix(ts, 0), reqs[0].Body, secret); reqs[0].Signature != want {
		t.Errorf("delivery signed %q, want %q: the new secret's signature alone", reqs[0].Signature, want)
	}
	out, errOut, err = adminWith(t, found, "secrets", "reseal")
	if err != nil || !strings.Contains(out, "webhook endpoint secrets: 1 already sealed with the current key") || errOut != "" {
		t.Errorf("secrets reseal at the end: %q %q %v; want the endpoint counted as sealed, nothing to warn of", out, errOut, err)
	}
}

// TestBadSecretKeyNamesTheSetting: a secret key that is not 32 bytes of
// base64 is refused naming its variable, and its place in
// TOLLGATE_SECRET_KEY_PREVIOUS when that lists several.
func TestBadSecretKeyNamesTheSetting(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	good := auth.GenerateSecretKey()
	for _, c := range []struct {
		current, previous, want string
	}{
		{"short", "", "TOLLGATE_SECRET_KEY: must be 32 bytes"},
		{good, "short", "TOLLGATE_SECRET_KEY_PREVIOUS: must be 32 bytes"},
		{good, good + ",short," + good, "TOLLGATE_SECRET_KEY_PREVIOUS: key 2 of its 3 (comma-separated): must be 32 bytes"},
	} {
		env := map[string]string{"TOLLGATE_DATABASE_URL": dbURL, "TOLLGATE_SECRET_KEY": c.current, "TOLLGATE_SECRET_KEY_PREVIOUS": c.previous}
		_, _, err := adminWith(t, env, "secrets", "reseal")
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("TOLLGATE_SECRET_KEY=%q TOLLGATE_SECRET_KEY_PREVIOUS=%q: %v, want %q…", c.current, c.previous, err, c.want)
		}
	}
}

// TestRevokeTwiceSaysAlready: revoking a key or a service token that is
// revoked already succeeds and says when it was revoked, as already.
func TestRevokeTwiceSaysAlready(t *testing.T) {
	dbURL, _ := cliDB(t)
	mustRun(t, dbURL, "plans", "create", "--name", "basic")
	mustRun(t, dbURL, "tenants", "create", "--name", "acme", "--plan", "basic")
	out, err := runAdmin(t, dbURL, "", "keys", "issue", "--tenant", "acme", "--json")
	testenv.Must(t, err)
	keyID := jsonField(t, []byte(out), "key", "id")
	_, err = runAdmin(t, dbURL, "", "tokens", "issue", "--name", "edge")
	testenv.Must(t, err)
	out, err = runAdmin(t, dbURL, "", "tokens", "list", "--json")
	testenv.Must(t, err)
	var tokens []auth.ServiceToken
	testenv.Must(t, json.Unmarshal([]byte(out), &tokens))
	for _, args := range [][]string{{"keys", "revoke", "--id", keyID}, {"tokens", "revoke", "--id", tokens[0].ID}} {
		first, err := runAdmin(t, dbURL, "", args...)
		testenv.Must(t, err)
		second, err := runAdmin(t, dbURL, "", args...)
		testenv.Must(t, err)
		at := first[strings.Index(first, "revoked at ")+len("revoked at "):][:len("2006-01-02T15:04:05Z")]
		if strings.Contains(first, "already") || !strings.Contains(second, "was already revoked at "+at) {
			t.Errorf("admin %s twice: %q, then %q; want the second to say it was already revoked at %s",
				strings.Join(args, " "), first, second, at)
		}
	}
}

// TestSeedRevokesItsEarlierTokens: each seed (each make run) issues a
// fresh year-long demo-gateway token and revokes those earlier seeds
// issued, one audited revocation each, leaving one active.
func TestSeedRevokesItsEarlierTokens(t *testing.T) {
	dbURL := testenv.DatabaseURL(t)
	db := openPool(t, dbURL)
	var last demo.Result
	for run := range 3 {
		before := lastAudit(t, db)
		out, err := runAdmin(t, dbURL, "", "seed", "demo", "--json", "--usage=false")
		testenv.Must(t, err)
		testenv.Must(t, json.Unmarshal([]byte(out), &last))
		want := []string{"cli seed.demo"}
		if run > 0 {
			want = append(want, "cli service_token.revoke")
		}
		if got := auditActions(t, db, before); strings.Join(got, ", ") != strings.Join(want, ", ") {
			t.Errorf("seed %d wrote %v, want %v", run+1, got, want)
		}
	}
	tokens, err := auth.NewStore(db).ListServiceTokens(context.Background())
	testenv.Must(t, err)
	public, err := auth.NewStore(db).PublicKeys(context.Background())
	testenv.Must(t, err)
	current, _, err := auth.VerifyServiceToken(last.ServiceToken, public, time.Now())
	testenv.Must(t, err)
	var active []string
	for _, st := range tokens {
		if st.RevokedAt == nil {
			active = append(active, st.ID)
		}
	}
	if len(tokens) != 3 || len(active) != 1 || active[0] != current {
		t.Errorf("after 3 seeds: %d tokens, active %v; want 3, only the last seed's (%s)", len(tokens), active, current)
	}
}
