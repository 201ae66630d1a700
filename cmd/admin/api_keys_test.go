package main

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tollgate/tollgate/internal/adminapi"
	"github.com/tollgate/tollgate/internal/tenants"
	"github.com/tollgate/tollgate/internal/testenv"
)

// TestConcurrentKeyRotations: of many rotations of one key at once, one
// makes a new key; the others are 409. The audit log links the rotated
// key to its replacement.
func TestConcurrentKeyRotations(t *testing.T) {
	srv, op, acme, _ := acmeSetup(t)
	ctx := context.Background()
	_, k, err := tenants.NewStore(srv.DB).CreateKey(ctx, acme.ID, tenants.KeySpec{Name: "ci"})
	testenv.Must(t, err)
	keyURL := srv.URL + "/api/v1/tenants/" + acme.ID + "/keys/" + k.ID

	const n = 8
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { statuses[i] = call(t, "POST", keyURL+"/rotate", op, nil).StatusCode })
	}
	wg.Wait()
	count := map[int]int{}
	for _, s := range statuses {
		count[s]++
	}
	if count[http.StatusCreated] != 1 || count[http.StatusConflict] != n-1 {
		t.Errorf("statuses of %d concurrent rotations: %v; want one 201 and the rest 409", n, count)
	}
	keys, err := tenants.NewStore(srv.DB).ListKeys(ctx, acme.ID)
	testenv.Must(t, err)
	if len(keys) != 2 {
		t.Fatalf("%d keys after the rotations, want 2", len(keys))
	}
	var after string
	testenv.Must(t, srv.DB.QueryRow(ctx, `SELECT after->>'replaced_by' FROM audit_log WHERE action = 'key.rotate' AND target_id = $1`,
		k.ID).Scan(&after))
	if after != keys[0].ID {
		t.Errorf("audit of the rotation: replaced_by %q, want the new key %s", after, keys[0].ID)
	}
}

// TestLiveKeyLimitAPI: a tenant with tenants.MaxLiveKeys live keys gets no
// more through the API (409), not even by rotation, until it revokes one;
// operators' CLI is not limited.
func TestLiveKeyLimitAPI(t *testing.T) {
	srv, op, acme, admin := acmeSetup(t)
	ctx := context.Background()
	keys := srv.URL + "/api/v1/tenants/" + acme.ID + "/keys"
	var first adminapi.KeySecretResponse
	call(t, "POST", keys, admin, map[string]any{"name": "first"}).Decode(t, &first)
	// The rest straight into the table, plus some that do not count.
	_, err := srv.DB.Exec(ctx, `INSERT INTO api_keys (tenant_id, hash, prefix, expires_at, revoked_at)
		SELECT $1, sha256(convert_to('k' || g, 'UTF8')), 'tg_test', CASE WHEN g % 2 = 0 THEN now() - interval '1 hour' END,
			CASE WHEN g % 2 = 1 THEN now() END
		FROM generate_series(1, 30) g`, acme.ID)
	testenv.Must(t, err)
	_, err = srv.DB.Exec(ctx, `INSERT INTO api_keys (tenant_id, hash, prefix)
		SELECT $1, sha256(convert_to('live' || g, 'UTF8')), 'tg_test' FROM generate_series(2, $2) g`, acme.ID, tenants.MaxLiveKeys)
	testenv.Must(t, err)

	for _, tok := range []string{admin, op} {
		res := call(t, "POST", keys, tok, map[string]any{"name": "one too many"})
		want(t, res, http.StatusConflict)
		if p := problemOf(t, res); !strings.Contains(p.Detail, "live keys") {
			t.Errorf("409 detail = %q, want it to name the live keys", p.Detail)
		}
		want(t, call(t, "POST", keys+"/"+first.Key.ID+"/rotate", tok, nil), http.StatusConflict)
	}
	// Rotation without grace ends the old key at once: no more live keys.
	want(t, call(t, "POST", keys+"/"+first.Key.ID+"/rotate", admin, map[string]any{"grace_period_s": 0}), http.StatusCreated)
	if _, err := runAdmin(t, srv.DBURL, "", "keys", "issue", "--tenant", acme.ID); err != nil {
		t.Errorf("keys issue over the API's limit: %v", err)
	}
	var page struct {
		Items []tenants.Key `json:"items"`
	}
	call(t, "GET", keys+"?limit=1", admin, nil).Decode(t, &page)
	want(t, call(t, "POST", keys+"/"+page.Items[0].ID+"/revoke", admin, nil), http.StatusOK)
	want(t, call(t, "POST", keys, admin, map[string]any{"name": "room again"}), http.StatusConflict) // the CLI went one over
	call(t, "GET", keys+"?limit=2", admin, nil).Decode(t, &page)
	want(t, call(t, "POST", keys+"/"+page.Items[1].ID+"/revoke", admin, nil), http.StatusOK)
	want(t, call(t, "POST", keys, admin, map[string]any{"name": "room again"}), http.StatusCreated)
}

// TestKeyExpiryRules: a tenant admin may set an expiry on a key without
// one, or bring it forward; clearing or extending it, or touching an
// expired key's, is for operators (403 otherwise) — so a tenant admin
// cannot undo a rotation's grace period or an operator's expiry.
func TestKeyExpiryRules(t *testing.T) {
	srv, op, acme, admin := acmeSetup(t)
	keys := srv.URL + "/api/v1/tenants/" + acme.ID + "/keys"
	newKey := func(body map[string]any) string {
		t.Helper()
		var made adminapi.KeySecretResponse
		res := call(t, "POST", keys, op, body)
		want(t, res, http.StatusCreated)
		res.Decode(t, &made)
		return keys + "/" + made.Key.ID
	}
	forbidden := func(url string, body map[string]any) {
		t.Helper()
		res := call(t, "PATCH", url, admin, body)
		want(t, res, http.StatusForbidden)
		if p := problemOf(t, res); p.Code != "forbidden" || !strings.Contains(p.Detail, "operators") {
			t.Errorf("403 problem = %+v", p)
		}
	}
	now := time.Now().UTC().Truncate(time.Second)

	// An operator's expiry: neither cleared nor extended by the tenant.
	limited := newKey(map[string]any{"expires_at": now.Add(2 * time.Hour)})
	forbidden(limited, map[string]any{"expires_at": nil})
	forbidden(limited, map[string]any{"expires_at": now.Add(3 * time.Hour)})
	forbidden(limited, map[string]any{"expires_at": now.Add(3 * time.Hour), "name": "renamed"})
	var k tenants.Key
	call(t, "GET", limited, admin, nil).Decode(t, &k)
	if k.ExpiresAt == nil || !k.ExpiresAt.Equal(now.Add(2*time.Hour)) || k.Name != "" {
		t.Errorf("after refused changes: %+v", k)
	}
	res := call(t, "PATCH", limited, admin, map[string]any{"expires_at": now.Add(time.Hour)})
	want(t, res, http.StatusOK)
	want(t, call(t, "PATCH", limited, admin, map[string]any{"name": "still mine"}), http.StatusOK)

	// A key without an expiry: the tenant may set one.
	open := newKey(map[string]any{})
	want(t, call(t, "PATCH", open, admin, map[string]any{"expires_at": now.Add(time.Hour)}), http.StatusOK)
	want(t, call(t, "PATCH", open, admin, map[string]any{"expires_at": nil}), http.StatusForbidden)

	// A rotated key's grace period cannot be undone.
	res = call(t, "POST", open+"/rotate", admin, map[string]any{"grace_period_s": 60})
	want(t, res, http.StatusCreated)
	forbidden(open, map[string]any{"expires_at": nil})
	forbidden(open, map[string]any{"expires_at": now.Add(24 * time.Hour)})

	// An expired key stays expired.
	expired := newKey(map[string]any{"expires_at": now.Add(time.Hour)})
	want(t, call(t, "PATCH", expired, op, map[string]any{"expires_at": now.Add(-time.Hour)}), http.StatusOK)
	forbidden(expired, map[string]any{"expires_at": now.Add(time.Hour)})
	forbidden(expired, map[string]any{"expires_at": nil})

	// Operators may do all of it.
	for _, url := range []string{limited, open, expired} {
		want(t, call(t, "PATCH", url, op, map[string]any{"expires_at": nil}), http.StatusOK)
	}
}
